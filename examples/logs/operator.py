"""Log handlers: what the pods of a TrainingJob say in their logs, in the job's status.

A job's pods carry its name in the label ``training-job``. Their containers log lines such
as ``epoch 3: model accuracy is 97.25%``, or an exception's last line when they fail. The log
handlers take those lines (the others never reach Python: they are matched in the core) and
note them on the pod; an index collects the pods' notes by job, and a timer writes each
job's best accuracy and its pods' failures into its status.

    kubectl apply -f examples/logs/crd.yaml -f examples/logs/trainingjob.yaml
    kopf run examples/logs/operator.py --verbose -n default
    # with pods that run (a kubelet, or kwok: see tests/cluster/kwok.yaml):
    kubectl apply -f examples/logs/pod.yaml
    kubectl get tj mnist                # ACCURACY and FAILURE, as the pod logs them
"""

import re

import kopf

ACCURACY = 'training.demo.kopf.dev/accuracy'
FAILURE = 'training.demo.kopf.dev/failure'


@kopf.on.log('', 'v1', 'pods', labels={'training-job': kopf.PRESENT},
             regex=r'model accuracy is (\d+(?:\.\d+)?)%')
def accuracy_logged(match: re.Match[str], memo: kopf.Memo, patch: kopf.Patch, logger: kopf.Logger,
                    **_) -> None:
    """A line with the accuracy: the pod's best so far, noted on the pod. (Kept in the pod's
    memo, not read from the pod: the lines come faster than the pod's own changes come back.)"""
    accuracy = float(match.group(1))
    if accuracy > memo.get('best_accuracy', -1.0):
        memo['best_accuracy'] = accuracy
        patch.metadata.annotations[ACCURACY] = str(accuracy)
        logger.info(f"The accuracy is {accuracy}% now.")


@kopf.on.log('', 'v1', 'pods', labels={'training-job': kopf.PRESENT},
             regex=r'^(\w+(?:Error|Exception)): (.*)$')
def failure_logged(match: re.Match[str], container: str, patch: kopf.Patch, **_) -> None:
    """An exception's last line (after a Python traceback): the pod's failure."""
    patch.metadata.annotations[FAILURE] = f"{container}: {match.group(1)}: {match.group(2)}"


@kopf.index('', 'v1', 'pods', labels={'training-job': kopf.PRESENT})
def training_pods(namespace: str | None, name: str | None, labels: kopf.Labels,
                  annotations: kopf.Annotations, **_) -> dict:
    """The pods' notes, by their jobs."""
    notes = {key: annotations[key] for key in (ACCURACY, FAILURE) if key in annotations}
    return {(namespace, labels['training-job']): (name, notes)}


@kopf.timer('demo.kopf.dev', 'v1', 'trainingjobs', interval=1.0)
def report(namespace: str | None, name: str | None, status: kopf.Status, patch: kopf.Patch,
           training_pods: kopf.Index, **_) -> None:
    """The job's status: the best accuracy of its pods, and their failures (if changed)."""
    notes = [notes for _, notes in training_pods.get((namespace, name), [])]
    accuracies = [float(n[ACCURACY]) for n in notes if ACCURACY in n]
    failures = sorted(n[FAILURE] for n in notes if FAILURE in n)
    accuracy = f"{max(accuracies)}%" if accuracies else None
    failure = '; '.join(failures) or None
    if accuracy != status.get('accuracy') or failure != status.get('failure'):
        patch.status['accuracy'] = accuracy
        patch.status['failure'] = failure
