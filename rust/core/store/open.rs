//! Opening a store: directories, lock, recovery, threads.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::{geometry, Inner, Store};
use crate::checkpoint::Checkpoint;
use crate::commit_log::{CommitLog, WarmAhead};
use crate::config::{FlushMode, StoreConfig};
use crate::consume_queue::store::ConsumeQueueStore;
use crate::dispatch::notifier::Notifier;
use crate::dispatch::reput::Reput;
use crate::dispatch::Dispatcher;
use crate::error::{Error, Result};
use crate::flush::FlushService;
use crate::lock::{self, StoreLock};
use crate::mapped_file::mmap::fork_generation;
use crate::mapped_file_queue::{Backing, MappedFileQueue};
use crate::message::msg_id::UniqueIdGenerator;
use crate::prepare::{self, Prepare, Preparer};
use crate::recovery::{self, RecoveryReport};
use crate::topic_config::TopicTable;
use crate::util::fs;
use crate::wakeup::WakeWord;

/// `interrupted`: asked while waiting for the writer lock (`StoreLock::acquire`).
pub(super) fn open(
    root: Option<&Path>,
    mut config: StoreConfig,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Store> {
    config.validate()?;
    let fork_gen = fork_generation();
    let writable = !config.read_only;
    let mut store_lock = None;
    let mut abnormal = false;
    if let Some(root) = root {
        if writable {
            geometry::check_new(root, &config)?;
            fs::create_dir_all(root, config.dir_mode)?;
            // The lock comes first: nothing below may touch a file without it.
            store_lock = Some(StoreLock::acquire(
                root,
                config.lock_wait,
                config.file_mode,
                interrupted,
            )?);
            abnormal = lock::abort_exists(root);
            for sub in ["commitlog", "consumequeue", "config"] {
                fs::create_dir_all(&root.join(sub), config.dir_mode)?;
            }
        } else if !root.is_dir() {
            return Err(Error::io(
                "open",
                root,
                // ENOENT, so callers (and Python's FileNotFoundError) see the errno.
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
    }

    // Before any file is read: every size below comes from here.
    let decided = geometry::decide(root, &config, writable)?;
    config.commit_log_file_size = Some(decided.geometry.commit_log_file_size);
    config.consume_queue_file_units = Some(decided.geometry.consume_queue_file_units);
    config.max_message_size = Some(decided.max_message_size);

    let (checkpoint, cp_data) = match root {
        Some(r) if writable || r.join("checkpoint").exists() => {
            let (cp, data) = Checkpoint::open(&r.join("checkpoint"), writable, config.file_mode)?;
            (Some(Arc::new(cp)), data)
        }
        _ => (None, None),
    };

    let backing = match root {
        Some(r) => Backing::Dir {
            dir: r.join("commitlog"),
            mode: config.file_mode,
            populate: config.warm_mapped_files,
        },
        None => Backing::Memory,
    };
    let files = MappedFileQueue::new(backing, decided.geometry.commit_log_file_size, writable);
    files.load()?;
    let commit_log = Arc::new(CommitLog::new(files));
    let cqs = Arc::new(ConsumeQueueStore::new(
        root.map(|r| r.join("consumequeue")),
        decided.geometry.consume_queue_file_size(),
        config.file_mode,
        config.dir_mode,
        !writable,
    ));
    let topics_path = root.map(|r| r.join("config").join("topics.json"));
    // No table at all (lost, or not copied with the data): the queues on disk name the topics.
    let table_missing = topics_path
        .as_ref()
        .is_some_and(|p| !fs::entry_exists(p) && !fs::entry_exists(&fs::backup_path(p)));
    let topics = TopicTable::load(topics_path, config.file_mode)?;
    if table_missing && !writable {
        topics.adopt_discovered(&cqs.discover_topics()?, false)?;
    }
    let notifier = Arc::new(Notifier::default());

    let mut report = RecoveryReport::default();
    let mut reput = None;
    let mut flush = None;
    if writable {
        let checkpointed = recovery::Checkpointed {
            mqlite: cp_data,
            rocketmq: checkpoint.as_ref().and_then(|c| c.rocketmq()),
        };
        report = recovery::recover(
            &commit_log,
            &cqs,
            checkpointed,
            abnormal,
            config.check_crc_on_recover,
        )?;
        if let Some(cp) = &checkpoint {
            let mut d = cp.get();
            d.confirm_phy_offset = report.end;
            d.logics_dispatched_offset = report.reput_from;
            cp.reset(d)?;
        }
        // Only now, with the re-dispatch point durable, may files recovery cut off go.
        cqs.remove_stale_files()?;
        if table_missing {
            topics.adopt_discovered(&cqs.discover_topics()?, true)?;
        }
        let dispatchers: Vec<Arc<dyn Dispatcher>> = vec![cqs.clone()];
        let r = Arc::new(Reput::new(
            Arc::clone(&commit_log),
            dispatchers,
            report.reput_from,
            config.flush_mode == FlushMode::Sync,
            Arc::clone(&notifier),
        ));
        // Consumers must see every recovered record as soon as open returns.
        r.dispatch_all()?;
        cqs.correct_min_offsets(commit_log.min_offset());
        {
            let mut a = commit_log.lock_appender();
            for cq in cqs.all() {
                a.set_queue_offset(cq.topic(), cq.queue_id(), cq.max_offset());
            }
        }
        let mut service = FlushService::new(
            Arc::clone(&commit_log),
            Arc::clone(&cqs),
            Arc::clone(&r),
            checkpoint.clone(),
            config.flush_mode,
            config.flush_interval,
        );
        if root.is_some() {
            service.retention = Some(config.file_reserved_time);
        }
        flush = Some(Arc::new(service));
        reput = Some(r);
        if let Some(root) = root {
            geometry::record(root, &decided, config.file_mode)?;
            lock::create_abort(root, config.file_mode)?;
        }
        if let Some(l) = &store_lock {
            l.record_holder()?;
        }
    }

    // The wake-up word is optional: without it, followers of other processes poll.
    let wake = match root {
        Some(r) if writable => WakeWord::create(r, config.file_mode).ok().map(Arc::new),
        Some(r) => WakeWord::follow(r).map(Arc::new),
        None => None,
    };
    if let (Some(w), true) = (&wake, writable) {
        notifier.set_remote(Arc::clone(w));
    }

    let inner = Arc::new(Inner {
        config,
        geometry: decided.geometry,
        max_message_size: decided.max_message_size,
        root: root.map(Path::to_path_buf),
        commit_log,
        cqs,
        topics,
        checkpoint,
        reput,
        flush,
        notifier,
        wake,
        lock: Mutex::new(store_lock),
        threads: Mutex::new(Vec::new()),
        closed: AtomicBool::new(false),
        fork_gen,
        recovery: report,
        uniq: UniqueIdGenerator::new(seed()),
        last_release: std::sync::atomic::AtomicI64::new(0),
        last_read_file: std::sync::atomic::AtomicU64::new(u64::MAX),
        // The files were just loaded.
        last_follow: std::sync::atomic::AtomicU64::new(super::follow::monotonic_ms()),
        follow_end: std::sync::atomic::AtomicU64::new(0),
    });
    start_threads(&inner)?;
    Ok(Store { inner })
}

fn seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

/// The reput thread's safety-net period. Producers (or the flush thread, in sync mode) wake it
/// whenever they leave records to it, so this only bounds how soon a failed dispatch is
/// retried when nothing else happens; every idle wake-up is CPU time taken from the store's
/// users (and, on a small machine, a chance to move a consumer to another CPU).
const REPUT_IDLE: Duration = Duration::from_millis(100);

fn start_threads(inner: &Arc<Inner>) -> Result<()> {
    let mut threads = inner.threads.lock().unwrap_or_else(|p| p.into_inner());
    let spawn_err = |e: std::io::Error| Error::io("spawn_thread", "mqlite", e);
    if let Some(r) = &inner.reput {
        let r = Arc::clone(r);
        threads.push(
            std::thread::Builder::new()
                .name("mqlite-reput".into())
                .spawn(move || r.run_thread(REPUT_IDLE))
                .map_err(spawn_err)?,
        );
    }
    if let Some(f) = &inner.flush {
        let f = Arc::clone(f);
        threads.push(
            std::thread::Builder::new()
                .name("mqlite-flush".into())
                .spawn(move || f.run_thread())
                .map_err(spawn_err)?,
        );
    }
    if inner.reput.is_some() {
        // The preparer (prepare.rs) of the next commit-log and consume-queue files; it exits
        // when the store stops sending (close) or is dropped.
        let (tx, rx) = mpsc::channel::<Prepare>();
        let tx = Preparer::new(tx);
        let files_pending = tx.counter();
        if inner.commit_log.files().is_empty() && inner.root.is_some() {
            // A new store: have the first file ready before the first send needs it.
            let _ = tx.send(Prepare::File(inner.commit_log.max_offset()));
        }
        inner.cqs.set_preparer(tx.clone());
        // Pages are readied ahead of the writer unless whole files are populated anyway; by
        // zero fill (large folios) in async mode only (commit_log::WarmAhead).
        let warm = match (inner.config.warm_mapped_files, inner.config.flush_mode) {
            (true, _) => WarmAhead::Off,
            (false, FlushMode::Async) => WarmAhead::ZeroFill,
            (false, FlushMode::Sync) => WarmAhead::Fault,
        };
        inner.commit_log.set_preallocator(tx, warm);
        let weak = Arc::downgrade(&inner.commit_log);
        threads.push(
            std::thread::Builder::new()
                .name("mqlite-prealloc".into())
                .spawn(move || prepare::run(&weak, &rx, &files_pending))
                .map_err(spawn_err)?,
        );
    }
    Ok(())
}
