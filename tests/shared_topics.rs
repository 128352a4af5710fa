//! Topic changes shared between running writer processes (`StoreConfig::shared_writers`,
//! docs/design-many-writers.md, FORMAT.md §7.1 and §14). The test binary runs itself as
//! children that open the store shared and obey one command per line on their stdin, answering
//! one line each on their stdout (after an `@`), so the parent orders what each process does by their answers
//! (a cause, never a timer).
//!
//! - A topic created, grown or auto-created by one process is seen by another at once: its
//!   next lookup, send, read or listing finds it, without reopening.
//! - Three processes create the same topics, topics of their own and one topic with
//!   `exist_ok = false` at the same time: every process ends with one configuration per topic
//!   (the first creator's), exactly one exclusive create succeeds and the others get the error a
//!   single process gives, and after every process has closed, the compacted table keeps every
//!   topic with its last settings.
//! - A topic deleted by one process refuses sends in another at once; created again there, it
//!   shows neither process the deleted one's messages.
//! - A process opening beside running ones does not compact the journal they append to.
//! - (`fault-injection`) A process aborted inside a topic change, holding the journal lock,
//!   leaves the others changing topics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::small_config;
use mqlite::{MessageRef, Store, StoreConfig, TagFilter, TopicConfig};

/// The store directory of a child (its presence makes the child entry point act).
const CHILD_DIR: &str = "MQLITE_TOPICS_CHILD_DIR";

/// Opens that must succeed wait for the store's locks: a child another test of this binary
/// forks holds a copy of every descriptor until it execs, and with it their locks.
const LOCK_WAIT: Duration = Duration::from_secs(30);

fn shared() -> StoreConfig {
    StoreConfig {
        shared_writers: true,
        lock_wait: Some(LOCK_WAIT),
        ..small_config()
    }
}

fn exclusive() -> StoreConfig {
    StoreConfig {
        lock_wait: Some(LOCK_WAIT),
        ..small_config()
    }
}

/// One line describing a topic's settings (or `NONE`).
fn describe(c: Option<&TopicConfig>) -> String {
    match c {
        Some(c) => format!(
            "{} r{} w{} p{} o{}",
            c.topic_name, c.read_queue_nums, c.write_queue_nums, c.perm, c.order as u8
        ),
        None => "NONE".to_owned(),
    }
}

fn answer<T>(r: mqlite::Result<T>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(e) => format!("ERR {}", e.kind()),
    }
}

/// The child's answer to one command line.
fn obey(store: &Store, words: &[&str]) -> String {
    let num = |i: usize| words[i].parse::<u32>().unwrap();
    match words {
        ["create", topic, ..] => answer(
            store.create_topic(topic, num(2), num(3), num(4) == 1, num(5) == 1),
            |()| "OK".to_owned(),
        ),
        ["update", topic, _] => answer(store.update_topic(topic, num(2)), |c| describe(Some(&c))),
        ["delete", topic] => answer(store.delete_topic(topic), |()| "OK".to_owned()),
        ["topic", topic] => answer(store.topic(topic), |c| describe(c.as_ref())),
        ["topics"] => answer(store.topics(), |all| {
            let names: Vec<String> = all.into_iter().map(|c| c.topic_name).collect();
            format!("TOPICS {}", names.join(","))
        }),
        ["send", topic, _, body] => answer(
            store.put(&MessageRef::new(topic, num(2), body.as_bytes())),
            |r| format!("OK {}", r.appended.queue_offset),
        ),
        ["read", topic, _] | ["read", topic, _, _] => answer(
            store.get_messages(
                topic,
                num(2),
                words.get(3).map_or(0, |w| w.parse().unwrap()),
                64,
                &TagFilter::all(),
            ),
            |r| {
                let bodies: Vec<String> = r
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.body()).into_owned())
                    .collect();
                format!("READ {}", bodies.join(","))
            },
        ),
        // Creates `Same<i>` (queues id + 1, a setting each process gives differently),
        // `Own<id>-<i>` and auto-creates `Auto<i>` by a send, for i in 0..n; then creates
        // `Excl` refusing an existing one. Answers with what it then sees, one line.
        ["race", _, _] => {
            let (id, n) = (num(1), num(2));
            let mut out = Vec::new();
            for i in 0..n {
                store
                    .create_topic(&format!("Same{i}"), id + 1, 6, false, true)
                    .unwrap();
                store
                    .create_topic(&format!("Own{id}-{i}"), 2, 6, id == 1, false)
                    .unwrap();
                let auto = format!("Auto{i}");
                store
                    .put(&MessageRef::new(&auto, 0, format!("{id}").as_bytes()))
                    .unwrap();
            }
            let excl = store.create_topic("Excl", 3, 6, false, false);
            out.push(answer(excl, |()| "EXCL OK".to_owned()));
            for i in 0..n {
                out.push(describe(store.topic(&format!("Same{i}")).unwrap().as_ref()));
            }
            out.join(";")
        }
        ["close"] => answer(store.close(), |()| "OK".to_owned()),
        other => panic!("unknown command {other:?}"),
    }
}

/// Child: opens the store shared, answers `OPEN`, then obeys its stdin until `close`.
#[test]
fn topics_child_obeys() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let store = Store::open(Path::new(&dir), shared()).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "@OPEN").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        writeln!(out, "@{}", obey(&store, &words)).unwrap();
        out.flush().unwrap();
        if words == ["close"] {
            break;
        }
    }
}

/// A child process and its pipes.
struct Peer {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Peer {
    /// Starts a child that opens the store at `root` shared, once it has opened.
    fn open(root: &Path) -> Peer {
        let mut peer = Peer::start(root);
        assert_eq!(peer.line(), "OPEN");
        peer
    }

    /// Starts a child without waiting for its open.
    fn start(root: &Path) -> Peer {
        Peer::start_with(root, &[])
    }

    /// `start`, with `env` set in the child.
    fn start_with(root: &Path, env: &[(&str, &str)]) -> Peer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "topics_child_obeys",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, root)
        .env_remove("MQLITE_KILL_AT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let to = child.stdin.take().unwrap();
        let from = BufReader::new(child.stdout.take().unwrap());
        Peer { child, to, from }
    }

    fn tell(&mut self, command: &str) {
        writeln!(self.to, "{command}").unwrap();
        self.to.flush().unwrap();
    }

    /// The child's next answer: what follows `@` (the test harness prints around it).
    fn line(&mut self) -> String {
        loop {
            let mut line = String::new();
            assert_ne!(
                self.from.read_line(&mut line).unwrap(),
                0,
                "the child ended"
            );
            if let Some((_, answer)) = line.trim_end().split_once('@') {
                return answer.to_owned();
            }
        }
    }

    fn ask(&mut self, command: &str) -> String {
        self.tell(command);
        self.line()
    }

    fn close(mut self) {
        assert_eq!(self.ask("close"), "OK");
        drop(self.to);
        assert!(self.child.wait().unwrap().success());
    }
}

fn names(store: &Store) -> Vec<String> {
    store
        .topics()
        .unwrap()
        .into_iter()
        .map(|c| c.topic_name)
        .collect()
}

#[test]
fn a_topic_created_or_grown_in_one_process_is_used_at_once_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    let mut peer = Peer::open(root);

    // Created here: the other process looks it up, sends to its last queue, lists it.
    store.create_topic("Made", 8, 6, true, false).unwrap();
    assert_eq!(peer.ask("topic Made"), "Made r8 w8 p6 o1");
    assert_eq!(peer.ask("send Made 7 there"), "OK 0");
    assert_eq!(peer.ask("topics"), "TOPICS Made");
    // Its message is read here, and this process's there.
    store.put(&MessageRef::new("Made", 7, b"here")).unwrap();
    assert_eq!(peer.ask("read Made 7"), "READ there,here");

    // Grown here: the other process sends to a new queue at once.
    store.update_topic("Made", 12).unwrap();
    assert_eq!(peer.ask("send Made 11 grown"), "OK 0");
    // Grown there: seen here at once, and a shrink is refused there as here.
    assert_eq!(peer.ask("update Made 16"), "Made r16 w16 p6 o1");
    assert_eq!(
        describe(store.topic("Made").unwrap().as_ref()),
        "Made r16 w16 p6 o1"
    );
    assert_eq!(peer.ask("update Made 4"), "ERR INVALID_ARGUMENT");
    store.put(&MessageRef::new("Made", 15, b"x")).unwrap();

    // Created there (explicitly, and by a send): sent to and read here at once.
    assert_eq!(peer.ask("create Read 2 4 0 0"), "OK");
    assert_eq!(
        describe(store.topic("Read").unwrap().as_ref()),
        "Read r2 w2 p4 o0"
    );
    assert!(matches!(
        store.put(&MessageRef::new("Read", 0, b"x")),
        Err(mqlite::Error::TopicNotWritable { .. })
    ));
    assert_eq!(peer.ask("send Auto 3 first"), "OK 0");
    let r = store.put(&MessageRef::new("Auto", 3, b"second")).unwrap();
    assert_eq!(r.appended.queue_offset, 1);
    assert_eq!(names(&store), ["Auto", "Made", "Read"]);
    // An exclusive create of a topic the other process made is refused here as there.
    assert!(matches!(
        store.create_topic("Auto", 4, 6, false, false),
        Err(mqlite::Error::InvalidArgument { .. })
    ));

    peer.close();
    store.close().unwrap();
    let reopened = Store::open(root, exclusive()).unwrap();
    let all: Vec<String> = reopened
        .topics()
        .unwrap()
        .iter()
        .map(|c| describe(Some(c)))
        .collect();
    assert_eq!(
        all,
        ["Auto r4 w4 p6 o0", "Made r16 w16 p6 o1", "Read r2 w2 p4 o0"]
    );
}

#[test]
fn a_topic_deleted_in_one_process_and_created_again_in_another_hides_its_old_messages() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    let mut peer = Peer::open(root);
    store.create_topic("Gone", 1, 6, false, false).unwrap();
    store.put(&MessageRef::new("Gone", 0, b"here")).unwrap();
    assert_eq!(peer.ask("send Gone 0 there"), "OK 1");

    // Deleted there: this process's next look-up finds it gone.
    assert_eq!(peer.ask("delete Gone"), "OK");
    assert!(store.topic("Gone").unwrap().is_none());
    assert_eq!(peer.ask("delete Gone"), "ERR TOPIC_NOT_FOUND");

    // Created again here by a send (topics are auto-created): neither process shows the old
    // messages, from any offset.
    let r = store.put(&MessageRef::new("Gone", 0, b"again")).unwrap();
    assert_eq!(r.appended.queue_offset, 2);
    assert!(store.topic("Gone").unwrap().unwrap().since_offset() > 0);
    assert_eq!(peer.ask("send Gone 0 more"), "OK 3");
    assert_eq!(peer.ask("read Gone 0 2"), "READ again,more");
    assert_eq!(peer.ask("read Gone 0 0"), "READ");
    let r = store
        .get_messages("Gone", 0, 0, 64, &TagFilter::all())
        .unwrap();
    assert_eq!(r.status, mqlite::GetStatus::OffsetTooSmall);
    assert_eq!(r.next_offset, 2);
    assert_eq!(store.queue_offsets("Gone", 0).unwrap(), (2, 4));

    // Deleted and created again there, explicitly: the same here.
    assert_eq!(peer.ask("delete Gone"), "OK");
    assert_eq!(peer.ask("create Gone 1 6 0 0"), "OK");
    assert_eq!(peer.ask("send Gone 0 third"), "OK 4");
    assert_eq!(store.queue_offsets("Gone", 0).unwrap(), (4, 5));
    peer.close();
    store.close().unwrap();
}

#[test]
fn three_processes_creating_topics_at_once_end_with_one_configuration_each() {
    const N: u32 = 20;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The store exists, and no process has it open while they race.
    Store::open(root, shared()).unwrap().close().unwrap();
    let mut peers: Vec<Peer> = (0..3).map(|_| Peer::open(root)).collect();
    for (id, p) in peers.iter_mut().enumerate() {
        p.tell(&format!("race {id} {N}"));
    }
    let answers: Vec<Vec<String>> = peers
        .iter_mut()
        .map(|p| p.line().split(';').map(str::to_owned).collect())
        .collect();
    // Exactly one exclusive create succeeded; the others got the single-process error.
    let excl: Vec<&str> = answers.iter().map(|a| a[0].as_str()).collect();
    assert_eq!(
        excl.iter().filter(|a| **a == "EXCL OK").count(),
        1,
        "{excl:?}"
    );
    assert_eq!(
        excl.iter()
            .filter(|a| **a == "ERR INVALID_ARGUMENT")
            .count(),
        2,
        "{excl:?}"
    );
    // Every process sees the same configuration of each topic they all created: one
    // creator's, whole.
    let same = &answers[0][1..];
    for a in &answers[1..] {
        assert_eq!(&a[1..], same);
    }
    let mut want: BTreeMap<String, String> = BTreeMap::new();
    for (i, line) in same.iter().enumerate() {
        let ok = (1..=3).any(|q| *line == format!("Same{i} r{q} w{q} p6 o0"));
        assert!(ok, "{line}");
        want.insert(format!("Same{i}"), line.clone());
    }
    for i in 0..N {
        want.insert(format!("Auto{i}"), format!("Auto{i} r4 w4 p6 o0"));
        for id in 0..3 {
            let o = u8::from(id == 1);
            want.insert(format!("Own{id}-{i}"), format!("Own{id}-{i} r2 w2 p6 o{o}"));
        }
    }
    want.insert("Excl".into(), "Excl r3 w3 p6 o0".into());
    // Every process lists every topic.
    let listing = format!(
        "TOPICS {}",
        want.keys().cloned().collect::<Vec<_>>().join(",")
    );
    for p in &mut peers {
        assert_eq!(p.ask("topics"), listing);
    }
    // Each auto-created topic holds one message from each process, at offsets 0..3.
    let auto = Store::open(root, shared()).unwrap();
    for i in 0..N {
        let (min, max) = auto.queue_offsets(&format!("Auto{i}"), 0).unwrap();
        assert_eq!((min, max), (0, 3), "Auto{i}");
    }
    auto.close().unwrap();
    // The last of them to close compacts: the table keeps every topic and its settings.
    for p in peers {
        p.close();
    }
    let journal = root.join("config/topics.journal");
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), 8);
    let reopened = Store::open(root, exclusive()).unwrap();
    let got: BTreeMap<String, String> = reopened
        .topics()
        .unwrap()
        .iter()
        .map(|c| (c.topic_name.clone(), describe(Some(c))))
        .collect();
    assert_eq!(got, want);
}

/// A process that opens while another runs leaves the journal the running one appends to:
/// changes made before and after that open all survive the last close.
#[test]
fn a_later_opener_keeps_the_running_writers_journal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    store.create_topic("Before", 1, 6, false, false).unwrap();
    let mut peer = Peer::open(root);
    store.create_topic("After", 2, 6, false, false).unwrap();
    store.update_topic("Before", 3).unwrap();
    assert_eq!(peer.ask("topic After"), "After r2 w2 p6 o0");
    assert_eq!(peer.ask("create There 5 6 0 0"), "OK");
    // This process closes last here, the other first.
    peer.close();
    store.close().unwrap();
    let reopened = Store::open(root, exclusive()).unwrap();
    let got: Vec<String> = reopened
        .topics()
        .unwrap()
        .iter()
        .map(|c| describe(Some(c)))
        .collect();
    assert_eq!(
        got,
        [
            "After r2 w2 p6 o0",
            "Before r3 w3 p6 o0",
            "There r5 w5 p6 o0"
        ]
    );
    // And the file RocketMQ reads holds them all.
    let json = std::fs::read_to_string(root.join("config/topics.json")).unwrap();
    for t in ["After", "Before", "There"] {
        assert!(json.contains(&format!("\"topicName\": \"{t}\"")), "{t}");
    }
}

/// Two shared writers of one process are two tables too: a topic one grows while the other
/// auto-creates it ends with the grown configuration, never the default one over it.
#[test]
fn an_auto_create_never_replaces_a_topic_another_writer_made() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path(), shared()).unwrap();
    let b = Store::open(dir.path(), shared()).unwrap();
    a.create_topic("T", 8, 6, false, false).unwrap();
    // B's send to queue 6 is in range only with A's configuration.
    let r = b.put(&MessageRef::new("T", 6, b"x")).unwrap();
    assert_eq!(r.appended.queue_offset, 0);
    assert_eq!(b.topic("T").unwrap().unwrap().write_queue_nums, 8);
    a.close().unwrap();
    b.close().unwrap();
    let reopened = Store::open(dir.path(), exclusive()).unwrap();
    assert_eq!(reopened.topic("T").unwrap().unwrap().write_queue_nums, 8);
}

/// A process aborted inside a topic change, holding the journal lock (its record written, not
/// synced): the kernel releases the lock, and the others go on changing topics without
/// reopening, every process reading the same table.
#[cfg(feature = "fault-injection")]
#[test]
fn a_writer_killed_inside_a_topic_change_leaves_the_others_changing_topics() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = Store::open(root, shared()).unwrap();
    store.create_topic("First", 1, 6, false, false).unwrap();
    let mut other = Peer::open(root);
    let mut victim = Peer::start_with(root, &[("MQLITE_KILL_AT", "topics.journal_unsynced:1")]);
    assert_eq!(victim.line(), "OPEN");
    victim.tell("create Dead 1 6 0 0");
    let status = victim.child.wait().unwrap();
    assert!(!status.success(), "the victim should have been aborted");
    store.create_topic("Alive", 2, 6, false, false).unwrap();
    assert_eq!(other.ask("create There 3 6 0 0"), "OK");
    // The dead change's record is whole or absent; every process agrees on which.
    let here = names(&store);
    assert_eq!(other.ask("topics"), format!("TOPICS {}", here.join(",")));
    for t in ["Alive", "First", "There"] {
        assert!(here.iter().any(|n| n == t), "{t} in {here:?}");
    }
    other.close();
    store.close().unwrap();
    let reopened = Store::open(root, exclusive()).unwrap();
    assert_eq!(names(&reopened), here);
}
