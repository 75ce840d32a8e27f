"""What `kopf rbac generate` warns it cannot know of devserver-operator, declared as its warnings
say: a DevServerUser's namespace is named from its spec (dev-<username>), so its account, role
and binding go to any namespace. (The `escalate` and `bind` that writing roles needs are added
by the generator to each such rule.)"""

import kopf

REASON = "a DevServerUser's namespace is dev-<spec.username>: any namespace"
kopf.rbac.declare('serviceaccounts', verbs=['create', 'delete'], namespace='*', reason=REASON)
kopf.rbac.declare('roles.rbac.authorization.k8s.io', verbs=['get', 'create', 'patch', 'delete'], namespace='*',
                  reason=REASON)
kopf.rbac.declare('rolebindings.rbac.authorization.k8s.io', verbs=['get', 'create', 'patch', 'delete'],
                  namespace='*', reason=REASON)
