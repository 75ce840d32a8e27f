//! The windows between a cycle's writes, each one tried: an object created, updated twice
//! and deleted through the engine's cycles, with the writes of their patches (as `applying::plan`
//! orders them) applied to a model of the API server one at a time, and the operator
//! "killed" before a given write (its memory gone, the object listed again by a new one: at
//! once, or only after the object has changed again while it was down).
//! For every window, with every combination of storages: no handler's result is lost, no
//! cause is left unhandled, and a handler runs again at most once.

use crate::client::applying::{plan, Target, Write};
use crate::client::resources::Resource;
use crate::client::watching::EventType;
use crate::engine::context::Memory;
use crate::engine::processing::process_changing;
use crate::engine::testing::{self, event, object, Daemon, FakeHooks, FakePatcher, Handlers};
use crate::intents::hooks::HandlerKind;
use crate::settings::Settings;
use crate::state::patches::{FinalizerOp, Patch};
use crate::state::storages::{DiffBaseSpec, NoCustomStorages, ProgressSpec, Storages};
use crate::util::dicts;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The API server's copy of the object, as our writes change it.
struct Server {
    body: Option<Value>,
    version: u64,
    status_subresource: bool,
    finalizer: String,
}

impl Server {
    fn write(&mut self, write: &Write) {
        let Some(body) = self.body.as_mut() else {
            return;
        };
        let mut patch = Value::Object(write.patch.clone());
        match (write.target, self.status_subresource) {
            // The status subresource takes only the status; the object ignores its status.
            (Target::Status, _) => patch = json!({"status": patch["status"].clone()}),
            (Target::Main, true) => drop(patch.as_object_mut().unwrap().shift_remove("status")),
            (Target::Main, false) => {}
        }
        dicts::merge(body, &patch);
        if let Some(op) = write.finalizer {
            let finalizers = body["metadata"]["finalizers"].as_array().cloned();
            let mut finalizers = finalizers.unwrap_or_default();
            finalizers.retain(|f| f != self.finalizer.as_str());
            if op == FinalizerOp::Add {
                finalizers.push(json!(self.finalizer));
            }
            body["metadata"]["finalizers"] = json!(finalizers);
        }
        self.touched();
    }

    fn touched(&mut self) {
        self.version += 1;
        let Some(body) = self.body.as_mut() else {
            return;
        };
        body["metadata"]["resourceVersion"] = json!(self.version.to_string());
        let deleting = body["metadata"].get("deletionTimestamp").is_some();
        let free = body["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if deleting && free {
            self.body = None;
        }
    }
}

/// One life of the object; the operator dies before write number `crash_at` (if given).
struct Life {
    server: Server,
    memory: Memory,
    writes: usize,
    crash_at: Option<usize>,
    crashed: bool,
    /// Killed, it stays down until the object's next change (else it restarts at once).
    down_until_next_change: bool,
    /// Down now: the phase's cycles ended with the kill.
    down: bool,
}

impl Life {
    /// Cycles until the object is settled (no writes, nothing to wait for), or the operator
    /// is killed and stays down.
    async fn settle(&mut self, ctx: &Arc<crate::engine::context::ResourceContext>) {
        self.down = false;
        for _ in 0..30 {
            let Some(body) = self.server.body.clone() else {
                return;
            };
            let event_type = match self.memory.noticed_by_listing && !self.memory.fully_handled_once
            {
                true => EventType::Listed,
                false => EventType::Modified,
            };
            let cycle = process_changing(
                ctx,
                &mut self.memory,
                &event(event_type, body),
                Patch::default(),
                None,
            )
            .await
            .expect("the storages work");
            let writes = plan(cycle.patch, self.server.status_subresource);
            if writes.is_empty() && cycle.delays.is_empty() {
                return;
            }
            for write in &writes {
                if Some(self.writes) == self.crash_at && !self.crashed {
                    // Killed: what it had in memory is gone; a new one lists the object.
                    self.crashed = true;
                    self.memory = Memory {
                        noticed_by_listing: true,
                        ..Default::default()
                    };
                    if self.down_until_next_change {
                        self.down = true;
                        return;
                    }
                    break;
                }
                self.server.write(write);
                self.writes += 1;
            }
        }
        panic!("the object never settled");
    }
}

const HANDLERS: [(&str, &str); 5] = [
    ("create_a", "create"),
    ("create_b", "create"),
    ("update_a", "update"),
    ("update_b", "update"),
    ("delete_fn", "delete"),
];

fn status_path(leaf: &str) -> Vec<String> {
    vec!["status".into(), "kopf".into(), leaf.into()]
}

fn progress_in_annotations() -> ProgressSpec {
    let ProgressSpec::Multi { storages } = ProgressSpec::default() else {
        unreachable!("Kopf's smart storage is a multi-storage");
    };
    storages[0].clone()
}

fn progress_in_status() -> ProgressSpec {
    ProgressSpec::Status {
        field: status_path("progress"),
        touch_field: status_path("dummy"),
        writable: true,
    }
}

/// Every combination of where progress and the diff base live, with and without a status
/// subresource.
fn combinations() -> Vec<(String, Storages, bool)> {
    let progress = [
        ("progress in annotations", progress_in_annotations()),
        ("progress in status", progress_in_status()),
        ("smart progress (Kopf's default)", ProgressSpec::default()),
        (
            "progress in both",
            ProgressSpec::Multi {
                storages: vec![progress_in_annotations(), progress_in_status()],
            },
        ),
    ];
    let diffbase = [
        ("diff base in annotations", DiffBaseSpec::default()),
        (
            "diff base in status",
            DiffBaseSpec::Status {
                field: status_path("last-handled-configuration"),
                ignored_fields: vec![],
            },
        ),
    ];
    let mut found = Vec::new();
    for (progress_name, progress_spec) in &progress {
        for (diffbase_name, diffbase_spec) in &diffbase {
            for status_subresource in [true, false] {
                let storages = Storages::build(progress_spec, diffbase_spec, &NoCustomStorages)
                    .expect("no custom storages");
                let name = format!(
                    "{progress_name}, {diffbase_name}, {} status subresource",
                    if status_subresource { "a" } else { "no" }
                );
                found.push((name, storages, status_subresource));
            }
        }
    }
    found
}

/// An object's creation, two updates and deletion; the operator killed before write
/// `crash_at`, and restarted at once or only after the object's next change. Returns how
/// many writes the life took.
async fn life(
    storages: &Storages,
    status_subresource: bool,
    crash_at: Option<usize>,
    down: bool,
) -> usize {
    let hooks = FakeHooks::new(Daemon::Returning);
    hooks.results.store(true, Ordering::Relaxed);
    let changing = (HANDLERS.iter().enumerate())
        .map(|(index, (id, reason))| {
            testing::handler(json!({"index": index, "id": id, "reason": reason,
                                    "requires_finalizer": *reason == "delete"}))
        })
        .collect();
    let handlers = Handlers {
        changing,
        ..Default::default()
    };
    let mut resource: Resource = (*testing::resource()).clone();
    if status_subresource {
        resource.subresources = vec!["status".into()];
    }
    let settings = Settings::default();
    let finalizer = settings.persistence.finalizer.clone();
    let patcher = Arc::new(FakePatcher::default());
    let ctx = testing::context_with(
        handlers,
        settings,
        hooks.clone(),
        patcher,
        storages.clone(),
        Arc::new(resource),
    );
    let mut life = Life {
        server: Server {
            body: Some(object("a", "1", json!({"greeting": "hi"}))),
            version: 1,
            status_subresource,
            finalizer,
        },
        memory: Memory::default(),
        writes: 0,
        crash_at,
        crashed: false,
        down_until_next_change: down,
        down: false,
    };
    let calls = |id: &str| {
        let index = HANDLERS.iter().position(|(h, _)| *h == id).unwrap();
        let calls = hooks.calls();
        calls
            .iter()
            .filter(|c| c.kind == HandlerKind::Changing && c.handler == index)
            .count()
    };
    let handled = |body: &Value| {
        ctx.diffbase
            .fetch(body)
            .unwrap()
            .map(|essence| essence["spec"]["greeting"].clone())
    };
    let window = format!(
        "killed before write #{crash_at:?}{}",
        if down { ", down until a change" } else { "" }
    );

    life.settle(&ctx).await;
    if !life.down {
        let body = life.server.body.clone().expect("not deleted");
        for (index, id) in ["create_a", "create_b"].iter().enumerate() {
            assert_eq!(
                body["status"][id],
                json!({"by": index}),
                "{window}: the result of {id}"
            );
            assert!(
                (1..=2).contains(&calls(id)),
                "{window}: {id} ran {} times",
                calls(id)
            );
        }
        assert_eq!(
            handled(&body),
            Some(json!("hi")),
            "{window}: the creation is handled"
        );
    }

    // Two updates: records of the first one's progress must not count for the second.
    for (nth, greeting) in [(1, "hello"), (2, "hey")] {
        let was_down = life.down;
        let before = life.server.body.clone().expect("not deleted");
        let (handled_before, calls_before) =
            (handled(&before), [calls("update_a"), calls("update_b")]);
        let body = life.server.body.as_mut().unwrap();
        body["spec"]["greeting"] = json!(greeting);
        if !(down && life.crashed) {
            for id in ["update_a", "update_b"] {
                body["status"][id] = Value::Null; // to see that it is written again
            }
        }
        life.server.touched();
        life.settle(&ctx).await;
        if was_down && handled_before == Some(json!("hello")) {
            // The first update was marked handled before the kill: the second one, which came
            // while the operator was down, is a change of its own; no record of the first
            // update's progress may make a handler skip it.
            assert!(
                calls("update_a") > calls_before[0],
                "{window}: update_a skipped update #{nth}"
            );
            assert!(
                calls("update_b") > calls_before[1],
                "{window}: update_b skipped update #{nth}"
            );
        }
        if life.down {
            continue;
        }
        let body = life.server.body.clone().expect("not deleted");
        assert_eq!(
            handled(&body),
            Some(json!(greeting)),
            "{window}: update #{nth} is handled"
        );
        // Changes that came while it was down are handled as one (as in Kopf).
        let merged = down && life.crashed;
        for (index, id) in [(2, "update_a"), (3, "update_b")] {
            let ran = calls(id);
            assert!(
                ran <= nth + 1,
                "{window}: {id} ran {ran} times in {nth} updates"
            );
            if !merged {
                assert_eq!(
                    body["status"][id],
                    json!({"by": index}),
                    "{window}: update #{nth}'s {id}"
                );
                assert!(
                    ran >= nth,
                    "{window}: {id} ran {ran} times in {nth} updates"
                );
            }
        }
    }

    let body = life.server.body.as_mut().unwrap();
    body["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
    life.server.touched();
    life.settle(&ctx).await;
    if life.down {
        life.settle(&ctx).await; // it comes back; nothing changes any more
    }
    assert!(
        life.server.body.is_none(),
        "{window}: the object is released and gone"
    );
    assert!(
        (1..=2).contains(&calls("delete_fn")),
        "{window}: delete_fn ran {} times",
        calls("delete_fn")
    );
    assert!(crash_at.is_none() || life.crashed || crash_at >= Some(life.writes));
    life.writes
}

#[tokio::test(start_paused = true)]
async fn a_kill_between_any_two_writes_loses_no_result_and_reruns_at_most_once() {
    let mut windows = 0;
    let mut table = Vec::new();
    for (name, storages, status_subresource) in combinations() {
        let writes = life(&storages, status_subresource, None, false).await;
        for crash_at in 0..writes {
            for down in [false, true] {
                life(&storages, status_subresource, Some(crash_at), down).await;
                windows += 1;
            }
        }
        table.push(format!("{name}: {writes} writes"));
    }
    eprintln!("{windows} windows checked:\n  {}", table.join("\n  "));
    assert!(
        windows >= 16 * 2 * 6,
        "every combination has its windows: {windows}"
    );
}
