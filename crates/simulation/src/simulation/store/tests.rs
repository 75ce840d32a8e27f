use super::*;
use serde_json::json;

fn greetings() -> Kind {
    Kind {
        group: "demo.kopf.dev".into(),
        version: "v1".into(),
        plural: "greetings".into(),
        kind: "Greeting".into(),
        namespaced: true,
        status: true,
        short_names: vec!["gr".into()],
        categories: vec![],
        schema: None,
    }
}

fn configmaps() -> Kind {
    Kind {
        group: "".into(),
        version: "v1".into(),
        plural: "configmaps".into(),
        kind: "ConfigMap".into(),
        namespaced: true,
        status: false,
        short_names: vec!["cm".into()],
        categories: vec![],
        schema: None,
    }
}

const G: &str = "greetings.demo.kopf.dev";

fn store() -> Store {
    let store = Store::new(Box::new(|| {
        DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .to_utc()
    }));
    store.define(greetings());
    store.define(configmaps());
    store
}

/// A Greeting made in the namespace `ns`.
fn greeting(store: &Store, body: Value) -> Value {
    store.create(G, Some("ns"), body).unwrap()
}

fn version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn merge(
    store: &Store,
    name: &str,
    patch: Value,
    subresource: Option<&str>,
) -> Result<Value, ApiError> {
    store.patch(G, Some("ns"), name, PatchType::Merge, &patch, subresource)
}

fn drain(events: &mut mpsc::UnboundedReceiver<Watched>) -> Vec<(&'static str, String)> {
    let mut seen = Vec::new();
    while let Ok((event_type, object)) = events.try_recv() {
        seen.push((event_type.name(), name_of(&object).to_owned()));
    }
    seen
}

#[test]
fn creation_sets_what_the_server_sets() {
    let store = store();
    let made = greeting(
        &store,
        json!({"metadata": {"name": "g1", "uid": "mine"}, "spec": {"a": 1}, "status": {"x": 1}}),
    );
    assert_eq!(made["apiVersion"], "demo.kopf.dev/v1");
    assert_eq!(made["kind"], "Greeting");
    assert_eq!(made["metadata"]["namespace"], "ns");
    assert_eq!(made["metadata"]["generation"], 1);
    assert_eq!(
        made["metadata"]["creationTimestamp"],
        "2026-01-02T03:04:05Z"
    );
    assert_ne!(made["metadata"]["uid"], "mine");
    assert_eq!(made["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(
        made.get("status").is_none(),
        "a status subresource is not set at creation"
    );
    assert_eq!(store.get(G, Some("ns"), "g1").unwrap(), made);

    let generated = greeting(&store, json!({"metadata": {"generateName": "g-"}}));
    assert!(generated["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("g-"));
    assert!(version(&generated) > version(&made));

    let again = store.create(G, Some("ns"), json!({"metadata": {"name": "g1"}}));
    let again = again.unwrap_err();
    assert_eq!((again.code, again.reason), (409, "AlreadyExists"));
    let nameless = store
        .create(G, Some("ns"), json!({"metadata": {}}))
        .unwrap_err();
    assert_eq!(nameless.code, 422);
    let elsewhere = store.create(
        G,
        Some("ns"),
        json!({"metadata": {"name": "g3", "namespace": "other"}}),
    );
    assert_eq!(elsewhere.unwrap_err().code, 400);
    let unknown = store.create("widgets", Some("ns"), json!({"metadata": {"name": "w"}}));
    assert_eq!(unknown.unwrap_err().code, 404);
}

#[test]
fn a_patch_versions_what_changes_and_the_generation_follows_the_spec_only() {
    let store = store();
    let made = greeting(
        &store,
        json!({"metadata": {"name": "g1"}, "spec": {"a": 1}}),
    );
    let mut events = store
        .watch(G, Some("ns"), None, Some(version(&made)))
        .unwrap();

    let same = merge(&store, "g1", json!({"spec": {"a": 1}}), None).unwrap();
    assert_eq!(
        version(&same),
        version(&made),
        "nothing changed: no new version"
    );
    let labelled = merge(
        &store,
        "g1",
        json!({"metadata": {"labels": {"l": "v"}}}),
        None,
    )
    .unwrap();
    assert_eq!(labelled["metadata"]["generation"], 1);
    let changed = merge(&store, "g1", json!({"spec": {"a": 2}}), None).unwrap();
    assert_eq!(changed["metadata"]["generation"], 2);
    assert!(version(&changed) > version(&labelled));

    // The status: ignored by the object's endpoint, the only thing the status endpoint takes.
    let ignored = merge(&store, "g1", json!({"status": {"s": 1}}), None).unwrap();
    assert!(ignored.get("status").is_none());
    let status = merge(
        &store,
        "g1",
        json!({"status": {"s": 1}, "spec": {"a": 9}}),
        Some("status"),
    )
    .unwrap();
    assert_eq!(
        (status["status"]["s"].clone(), status["spec"]["a"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(status["metadata"]["generation"], 2);
    assert_eq!(drain(&mut events), vec![("MODIFIED", "g1".into()); 3]);

    // A patch that names an older version conflicts; an immutable field is kept.
    let stale = json!({"metadata": {"resourceVersion": made["metadata"]["resourceVersion"]}, "spec": {"a": 3}});
    assert_eq!(merge(&store, "g1", stale, None).unwrap_err().code, 409);
    let renamed = merge(
        &store,
        "g1",
        json!({"metadata": {"uid": "x", "name": "other"}}),
        None,
    )
    .unwrap();
    assert_eq!(renamed["metadata"]["uid"], made["metadata"]["uid"]);
    assert_eq!(renamed["metadata"]["name"], "g1");
    let json_patch = json!([{"op": "add", "path": "/spec/b", "value": 1}]);
    let patched = store
        .patch(G, Some("ns"), "g1", PatchType::Json, &json_patch, None)
        .unwrap();
    assert_eq!(patched["spec"], json!({"a": 2, "b": 1}));
    assert_eq!(
        merge(&store, "nope", json!({}), None).unwrap_err().code,
        404
    );
}

#[test]
fn a_replacement_with_an_old_version_conflicts() {
    let store = store();
    let made = greeting(
        &store,
        json!({"metadata": {"name": "g1"}, "spec": {"a": 1}}),
    );
    let mut newer = made.clone();
    newer["spec"]["a"] = json!(2);
    let replaced = store
        .replace(G, Some("ns"), "g1", newer.clone(), None)
        .unwrap();
    assert_eq!(replaced["spec"]["a"], 2);
    assert_eq!(
        store
            .replace(G, Some("ns"), "g1", newer, None)
            .unwrap_err()
            .code,
        409
    );
}

#[test]
fn finalizers_hold_the_deletion_until_the_last_one_goes() {
    let store = store();
    let made = greeting(
        &store,
        json!({"metadata": {"name": "g1", "finalizers": ["a", "b"]}}),
    );
    let mut events = store.watch(G, None, None, Some(version(&made))).unwrap();
    let deleting = store.delete(G, Some("ns"), "g1").unwrap();
    assert_eq!(
        deleting["metadata"]["deletionTimestamp"],
        "2026-01-02T03:04:05Z"
    );
    let added = merge(
        &store,
        "g1",
        json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
        None,
    );
    assert_eq!(
        added.unwrap_err().code,
        422,
        "no new finalizers while being deleted"
    );
    let timestamp = merge(
        &store,
        "g1",
        json!({"metadata": {"deletionTimestamp": null}}),
        None,
    )
    .unwrap();
    assert_eq!(
        timestamp["metadata"]["deletionTimestamp"],
        "2026-01-02T03:04:05Z"
    );
    merge(
        &store,
        "g1",
        json!({"metadata": {"finalizers": ["b"]}}),
        None,
    )
    .unwrap();
    let gone = merge(
        &store,
        "g1",
        json!({"metadata": {"finalizers": null}}),
        None,
    )
    .unwrap();
    assert!(version(&gone) > version(&deleting));
    assert_eq!(store.get(G, Some("ns"), "g1").unwrap_err().code, 404);
    assert_eq!(
        drain(&mut events),
        vec![
            ("MODIFIED", "g1".into()),
            ("MODIFIED", "g1".into()),
            ("DELETED", "g1".into())
        ]
    );
}

#[test]
fn the_children_of_a_gone_owner_are_deleted_after_it() {
    let store = store();
    let owner = greeting(&store, json!({"metadata": {"name": "g1"}}));
    let reference = json!({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting", "name": "g1",
                           "uid": owner["metadata"]["uid"]});
    let child = |name: &str, finalizers: Value| json!({"metadata": {"name": name, "ownerReferences": [reference], "finalizers": finalizers}});
    store
        .create("configmaps", Some("ns"), child("c1", json!([])))
        .unwrap();
    store
        .create("configmaps", Some("ns"), child("c2", json!(["keep"])))
        .unwrap();
    store
        .create(
            "configmaps",
            Some("ns"),
            json!({"metadata": {"name": "c3"}}),
        )
        .unwrap();
    store.delete(G, Some("ns"), "g1").unwrap();
    let (left, _) = store.list("configmaps", Some("ns"), None).unwrap();
    let left: Vec<(&str, bool)> = left
        .iter()
        .map(|o| (name_of(o), o["metadata"].get("deletionTimestamp").is_some()))
        .collect();
    assert_eq!(left, vec![("c2", true), ("c3", false)]);
}

#[test]
fn watches_start_from_a_version_or_with_all_objects_and_see_their_namespace_only() {
    let store = store();
    let first = greeting(
        &store,
        json!({"metadata": {"name": "g1", "labels": {"l": "x"}}}),
    );
    store
        .create(G, Some("other"), json!({"metadata": {"name": "g2"}}))
        .unwrap();
    let mut all = store.watch(G, None, None, None).unwrap();
    let mut in_ns = store.watch(G, Some("ns"), None, Some(0)).unwrap();
    let selector = LabelSelector::parse("l=x").unwrap();
    let mut labelled = store
        .watch(G, None, Some(selector), Some(version(&first)))
        .unwrap();
    greeting(&store, json!({"metadata": {"name": "g3"}}));
    merge(&store, "g1", json!({"spec": {"a": 1}}), None).unwrap();
    assert_eq!(
        drain(&mut all),
        vec![
            ("ADDED", "g1".into()),
            ("ADDED", "g2".into()),
            ("ADDED", "g3".into()),
            ("MODIFIED", "g1".into())
        ]
    );
    assert_eq!(
        drain(&mut in_ns),
        vec![
            ("ADDED", "g1".into()),
            ("ADDED", "g3".into()),
            ("MODIFIED", "g1".into())
        ]
    );
    assert_eq!(drain(&mut labelled), vec![("MODIFIED", "g1".into())]);
    let (items, listed) = store.list(G, None, None).unwrap();
    assert_eq!(
        (items.len(), listed),
        (3, version(&store.get(G, Some("ns"), "g1").unwrap()))
    );
}

#[test]
fn a_watch_from_a_compacted_version_is_gone() {
    let store = store();
    let made = greeting(&store, json!({"metadata": {"name": "g1"}}));
    for n in 0..HISTORY {
        merge(&store, "g1", json!({"spec": {"n": n}}), None).unwrap();
    }
    let gone = store
        .watch(G, None, None, Some(version(&made) - 1))
        .unwrap_err();
    assert_eq!((gone.code, gone.reason), (410, "Expired"));
    assert_eq!(gone.status()["code"], 410);
    let mut kept = store
        .watch(G, None, None, Some(version(&made) + 1))
        .unwrap();
    assert_eq!(drain(&mut kept).len(), HISTORY - 1);
}

#[test]
fn cut_watches_end_and_expired_versions_are_gone() {
    let store = store();
    let first = greeting(&store, json!({"metadata": {"name": "g1"}}));
    let mut watching = store.watch(G, None, None, Some(version(&first))).unwrap();
    store.cut_watches(false);
    assert!(matches!(
        watching.try_recv(),
        Err(mpsc::error::TryRecvError::Disconnected)
    ));
    // Cut only: a watch from the version seen goes on from there.
    greeting(&store, json!({"metadata": {"name": "g2"}}));
    let mut resumed = store.watch(G, None, None, Some(version(&first))).unwrap();
    assert_eq!(drain(&mut resumed), [("ADDED", "g2".to_owned())]);
    // Expired: that version is too old; a watch from now on is fine.
    store.cut_watches(true);
    let error = store
        .watch(G, None, None, Some(version(&first)))
        .unwrap_err();
    assert_eq!((error.code, error.reason), (410, "Expired"));
    let (_, now) = store.list(G, None, None).unwrap();
    assert!(store.watch(G, None, None, Some(now)).is_ok());
}

#[test]
fn a_crds_schema_prunes_and_refuses_what_is_written_and_a_pruned_write_changes_nothing() {
    let store = store();
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"who": {"type": "string"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}});
    store.define(Kind {
        schema: Some(Arc::new(schema)),
        ..greetings()
    });
    let made = greeting(
        &store,
        json!({"metadata": {"name": "g1"}, "spec": {"who": "Tess", "extra": 1}}),
    );
    assert_eq!(made["spec"], json!({"who": "Tess"}));
    let refused = merge(&store, "g1", json!({"spec": {"who": 5}}), None).unwrap_err();
    assert_eq!(
        refused.status()["message"],
        "Greeting.demo.kopf.dev \"g1\" is invalid: spec.who: Invalid value: \"integer\": \
         spec.who in body must be of type string: \"integer\""
    );
    let phased = merge(
        &store,
        "g1",
        json!({"status": {"phase": "Ready"}}),
        Some("status"),
    )
    .unwrap();
    let pruned = merge(
        &store,
        "g1",
        json!({"status": {"greet": "Hi"}}),
        Some("status"),
    )
    .unwrap();
    assert_eq!(pruned["status"], json!({"phase": "Ready"}));
    assert_eq!(
        version(&pruned),
        version(&phased),
        "nothing written: no new version"
    );
}
