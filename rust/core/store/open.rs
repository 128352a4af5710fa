//! Opening a store: directories, lock, recovery, derived-store registration, services.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::schedule::DelayLevelHook;
use super::timer::{TimerHook, TimerService};
use super::txn::Wait as TxnWait;
use super::{geometry, Inner, Store};
use crate::checkpoint::{Checkpoint, StoreProgress};
use crate::commit_log::{CommitLog, WarmAhead};
use crate::config::{FlushMode, StoreConfig};
use crate::consume_queue::store::ConsumeQueueStore;
use crate::dispatch::derived::{DerivedStore, DerivedStores};
use crate::dispatch::notifier::Notifier;
use crate::dispatch::queue_index::QueueIndex;
use crate::dispatch::reput::{FollowerService, Reput, REPUT_IDLE};
use crate::error::{Error, Result};
use crate::flush::FlushService;
use crate::index::{Geometry as IndexGeometry, IndexService};
use crate::leader::{LeaderRole, Seat};
use crate::lock::{self, OpenLock, StoreLock};
use crate::mapped_file::mmap::fork_generation;
use crate::mapped_file_queue::{Backing, MapCache, MappedFileQueue};
use crate::message::msg_id::UniqueIdGenerator;
use crate::prepare::{Prepare, PreparerService};
use crate::recovery::{self, RecoveryReport};
use crate::retention::Retention;
use crate::service::Service;
use crate::shared::layout::Capacity;
use crate::shared::{Attached, Initial, WriterShm};
use crate::topic_config::{Access, TopicTable};
use crate::util::fs;
use crate::wakeup::WakeWord;

/// The consume queues' clean-shutdown record, at the store's root (FORMAT.md §4.1).
const CLEAN_RECORD: &str = "queues.clean";

/// `interrupted`: asked while waiting for the writer lock (`StoreLock::acquire`).
pub(super) fn open(
    root: Option<&Path>,
    config: StoreConfig,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<Store> {
    open_with(root, config, interrupted, super::Extensions::default())
}

/// `open`, registering `extra` derived stores after the consume queues (tests register
/// stores of their own through `Store::open_with_derived`).
/// The longest a first shared opener waits to have taken the leader role (it is alone).
const FIRST_LEADER_WAIT: Duration = Duration::from_secs(10);

pub(super) fn open_with(
    root: Option<&Path>,
    mut config: StoreConfig,
    interrupted: &mut dyn FnMut() -> bool,
    ext: super::Extensions,
) -> Result<Store> {
    let super::Extensions {
        derived: extra,
        mut put_hooks,
    } = ext;
    config.validate()?;
    // Checked before anything is created: the checkpoint must be able to record every store.
    DerivedStores::check_names(
        std::iter::once(ConsumeQueueStore::NAME)
            .chain(extra.iter().map(|s| s.name()))
            .chain(config.index_enabled.then_some(crate::index::service::NAME)),
    )?;
    let fork_gen = fork_generation();
    let writable = !config.read_only;
    // In memory, or read-only: no other writer to share the store with (the field's doc).
    config.shared_writers &= root.is_some() && writable;
    let mut store_lock = None;
    let mut abnormal = false;
    // Shared writers: `open.lock`, held until the open returns, and the mapping a later
    // opener attaches to (lock.rs; `None` for the first opener, which builds it).
    let mut opening = None;
    let mut attach_to = None;
    if let Some(root) = root {
        if writable {
            geometry::check_new(root, &config)?;
            fs::create_dir_all(root, config.dir_mode)?;
            // The lock comes first: nothing below may touch a file without it.
            if config.shared_writers {
                opening = Some(OpenLock::acquire(root, config.file_mode, interrupted)?);
                let (held, first) = StoreLock::acquire_shared(
                    root,
                    config.lock_wait,
                    config.file_mode,
                    interrupted,
                )?;
                store_lock = Some(held);
                if !first {
                    attach_to = Some(Arc::new(attach_shared(root)?));
                }
            } else {
                // `open.lock` made to exist (not taken: a shared writer closes under it while
                // this one may wait), so that a shared opener refused meanwhile creates no file.
                drop(fs::open_rw(&root.join("open.lock"), config.file_mode)?);
                store_lock = Some(StoreLock::acquire(
                    root,
                    config.lock_wait,
                    config.file_mode,
                    interrupted,
                )?);
            }
            // A later shared opener: the abort marker is the running writers'.
            abnormal = lock::abort_exists(root) && attach_to.is_none();
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
    // One budget of idle mappings for every file of the store (mapped_file_queue/cache.rs).
    let map_cache = Arc::new(MapCache::new(config.max_mapped_files));
    let files = MappedFileQueue::new(backing, decided.geometry.commit_log_file_size, writable)
        .with_cache(Arc::clone(&map_cache));
    // A later shared opener loads beside running writers (the first one shares its files
    // after its recovery, below).
    if attach_to.is_some() {
        files.share();
    }
    // Lists and stats the files; recovery maps the ones it reads (the tail from the
    // checkpoint).
    files.load()?;
    let commit_log = Arc::new(CommitLog::new(files));
    commit_log.set_clock(config.clock.clone());
    // A service thread's panic refuses this process's writes from then on (service.rs).
    let on_panic: crate::service::PanicHook = {
        let log = Arc::clone(&commit_log);
        Arc::new(move |e| log.poison(Arc::new(e)))
    };
    // The registration list: every derived store, critical ones first. The consume queues
    // come first and are also the queue index reads go through.
    let mut queues = ConsumeQueueStore::new(
        root.map(|r| r.join("consumequeue")),
        decided.geometry.consume_queue_file_size(),
        config.file_mode,
        config.dir_mode,
        !writable,
    )
    .with_cache(map_cache)
    .with_clock(config.clock.clone())
    .with_log(Arc::clone(&commit_log));
    if let Some(r) = root {
        queues = queues.with_clean_record(r.join(CLEAN_RECORD));
    }
    let queues = Arc::new(queues);
    // A later shared opener recovers beside running writers (the first one, after its
    // recovery, below).
    if attach_to.is_some() {
        queues.share_files()?;
    }
    let shared_queues = Arc::clone(&queues);
    let index: Arc<dyn QueueIndex> = queues.clone();
    let mut registered: Vec<Arc<dyn DerivedStore>> = vec![queues];
    registered.extend(extra);
    // The key index: built by writers (non-critical, its own lane), read by every process.
    let key_index = (config.index_enabled || !writable).then(|| {
        Arc::new(IndexService::new(
            root.map(|r| r.join("index")),
            IndexGeometry::with_slots(config.index_hash_slots),
            writable,
            config.file_mode,
            config.dir_mode,
            config.clock.clone(),
        ))
    });
    if let Some(k) = key_index.as_ref().filter(|_| writable) {
        registered.push(Arc::clone(k) as Arc<dyn DerivedStore>);
    }
    let derived = DerivedStores::new(registered);
    let topics_path = root.map(|r| r.join("config").join("topics.json"));
    // No table at all (lost, or not copied with the data): the queues on disk name the topics.
    let table_missing = topics_path
        .as_ref()
        .is_some_and(|p| !fs::entry_exists(p) && !fs::entry_exists(&fs::backup_path(p)));
    // A later shared opener leaves the journal to the running writers (topic_config/shared.rs).
    let access = match (writable, attach_to.is_some()) {
        (false, _) => Access::Read,
        (true, false) => Access::Own,
        (true, true) => Access::Join,
    };
    let topics = TopicTable::load(topics_path, config.file_mode, access)?;
    if table_missing && !writable {
        topics.adopt_discovered(&index.discover_topics()?, false)?;
    }
    let notifier = Arc::new(Notifier::default());
    // The timer engine delivers timers and delay levels (store/timer/). Timers: the hook runs
    // before the delay-level hook (a DELAY level wins over a timer property, and the timer
    // hook leaves such a message to it).
    let timers = Arc::new(TimerService::new(
        &config,
        root.filter(|_| writable).map(|r| r.join("config")),
    )?);
    put_hooks.push(Arc::new(TimerHook::new(
        config.clock.clone(),
        config.timer_max_delay,
    )));
    // Send-back before delay levels: a delayed retry is scheduled to its origin topic and
    // comes back through this hook when due (store/retry/).
    put_hooks.push(Arc::new(super::retry::SendBackHook));
    // Delay levels: the hook runs after the registered ones (one of them may give a message a
    // level).
    put_hooks.push(Arc::new(DelayLevelHook::new(config.delay_levels.clone())));

    // Transactions (store/txn/): the gate and the table, whose snapshot the flush service
    // writes and whose open halves retention keeps.
    let txns = match writable {
        true => Some(Arc::new(super::txn::Txns::new(&config, root)?)),
        false => None,
    };
    let first_shared = config.shared_writers && attach_to.is_none();
    let mut report = RecoveryReport::default();
    let mut reput = None;
    let mut flush = None;
    let mut retention = None;
    let mut leader = None;
    let mut services: Vec<Arc<dyn Service>> = Vec::new();
    let mut preparer = None;
    if writable {
        let checkpointed = recovery::Checkpointed {
            mqlite: cp_data,
            progress: checkpoint
                .as_ref()
                .map(|c| c.progress())
                .unwrap_or_default(),
            rocketmq: checkpoint.as_ref().and_then(|c| c.rocketmq()),
        };
        // A later shared opener recovers holding the append lock: the log is still meanwhile.
        let appending = match &attach_to {
            Some(shm) => Some(commit_log.lock_shared(shm)?),
            None => None,
        };
        let recovered = match &appending {
            Some(w) => recovery::attach(&commit_log, &derived, &checkpointed, w)?,
            None => recovery::recover(
                &commit_log,
                &derived,
                &checkpointed,
                abnormal,
                config.check_crc_on_recover,
            )
            .map_err(|e| recovery::with_repair_hint(e, root))?,
        };
        drop(appending);
        report = recovered.report;
        // The checkpoint and what recovery cut off are the first opener's to settle.
        let settle = attach_to.is_none();
        if let Some(cp) = checkpoint.as_ref().filter(|_| settle) {
            let mut d = cp.get();
            d.confirm_phy_offset = report.end;
            d.logics_dispatched_offset = report.reput_from;
            let old = cp.progress();
            let progress = derived
                .iter()
                .zip(&recovered.starts)
                .map(|(s, &offset)| StoreProgress {
                    name: s.name().to_owned(),
                    offset,
                    store_timestamp: old
                        .iter()
                        .find(|p| p.name == s.name())
                        .map_or(0, |p| p.store_timestamp),
                })
                .collect();
            cp.reset(d, progress)?;
        }
        // Only now, with the re-dispatch points durable, may files recovery cut off go.
        if settle {
            derived.recovered()?;
        }
        // Running shared writers: the first of them adopted what the queues on disk name.
        if table_missing && settle {
            topics.adopt_discovered(&index.discover_topics()?, true)?;
        }
        let r = Arc::new(Reput::new(
            Arc::clone(&commit_log),
            &derived,
            &recovered.starts,
            config.flush_mode == FlushMode::Sync,
            Arc::clone(&notifier),
        ));
        // Consumers must see every recovered record as soon as open returns.
        r.dispatch_all()
            .map_err(|e| recovery::with_repair_hint(e, root))?;
        derived.ready(&commit_log);
        if let (Some(root), true) = (root, config.shared_writers) {
            shared_queues.share_files()?;
            let shm = match attach_to.take() {
                Some(shm) => shm,
                None => Arc::new(build_shared(root, &commit_log, &config, abnormal)?),
            };
            topics.share(Arc::clone(&shm))?;
            commit_log.files().share();
            commit_log.set_shared(shm);
        }
        let f = Arc::new(
            FlushService::new(
                Arc::clone(&commit_log),
                Arc::clone(&r),
                checkpoint.clone(),
                config.flush_mode,
                config.flush_interval,
            )
            .on_release_pages({
                let (log, derived) = (Arc::clone(&commit_log), derived.clone());
                move || super::release_pages(&log, &derived)
            })
            .after_checkpoint({
                let (log, txns) = (Arc::clone(&commit_log), txns.clone());
                move |f| {
                    if let Some(t) = &txns {
                        // Best effort: the next turn, or close, writes it.
                        let _ = t.persist(&log, TxnWait::No, || f.flush_commit_log());
                    }
                }
            }),
        );
        // The preparer (prepare.rs) of the next commit-log and derived-store files.
        let p = Arc::new(PreparerService::new());
        let tx = p.preparer();
        let shared = commit_log.shared().is_some();
        if commit_log.files().is_empty() && root.is_some() {
            // A new store: have the first file ready before the first send needs it.
            let _ = tx.send(Prepare::file(&commit_log, commit_log.max_offset()));
        }
        // Shared writers' prepared files are published under their names at once, never
        // deleted by their preparer (mapped_file_queue/mod.rs).
        derived.use_preparer(&tx);
        // Pages are readied ahead of the writer unless whole files are populated anyway; by
        // zero fill (large folios) in async mode only (commit_log::WarmAhead). Shared writers
        // fault pages in without writing: a zero fill past this process's writer could land
        // on another process's records (mapped_file_queue/fence.rs fences one process only).
        let warm = match (config.warm_mapped_files, config.flush_mode, shared) {
            (true, _, _) => WarmAhead::Off,
            (false, FlushMode::Async, false) => WarmAhead::ZeroFill,
            (false, _, _) => WarmAhead::Fault,
        };
        commit_log.set_preallocator(tx.clone(), warm);
        preparer = Some(tx);
        // Services start in this order and stop in reverse (service.rs).
        services.push(r.clone());
        if r.has_followers() {
            services.push(Arc::new(FollowerService::new(Arc::clone(&r), REPUT_IDLE)));
        }
        services.push(p);
        let keep = root.map(|root| {
            Arc::new(
                Retention::new(
                    Arc::clone(&commit_log),
                    derived.clone(),
                    Arc::clone(&r),
                    config.file_reserved_time,
                    config.clock.clone(),
                )
                .keeping({
                    let (t, x, log) = (Arc::clone(&timers), txns.clone(), Arc::clone(&commit_log));
                    move || {
                        let txn_floor = x.as_ref().map_or(u64::MAX, |x| x.floor(&log));
                        t.pending_floor().min(txn_floor)
                    }
                })
                .limiting_disk(config.disk_force_clean_ratio, {
                    let dir = root.join("commitlog");
                    move || disk_usage(&dir)
                }),
            )
        });
        // The leader's duties: an exclusive writer runs them; shared writers elect the one
        // process that does (leader.rs).
        let mut duties: Vec<Arc<dyn Service>> = vec![f.clone()];
        duties.extend(keep.clone().map(|k| k as Arc<dyn Service>));
        match root.filter(|_| shared) {
            Some(root) => {
                let seat = Seat::open(root, config.file_mode)?;
                // Shared writers: only the leader writes the index files.
                if let Some(k) = &key_index {
                    let s = Arc::clone(&seat);
                    k.set_may_write(Box::new(move || s.is_leader()));
                }
                let (f, r, keep) = (Arc::clone(&f), Arc::clone(&r), keep.clone());
                let timers = Arc::clone(&timers);
                // The first opener's take-over follows its own recovery: retention waits for
                // its service's first turn, as an exclusive writer's does (a pass at open
                // would map the oldest files of a long log). A later take-over follows a
                // leader that may have died inside its retention pass: it finishes it now.
                let opening = std::sync::atomic::AtomicBool::new(first_shared);
                let take_over = Box::new(move || {
                    f.set_leading();
                    // What a dead leader left unflushed, and its sync senders' requests.
                    let _ = f.flush_commit_log();
                    // The whole log indexed here (retention never deletes what is not).
                    let _ = r.dispatch_all();
                    let first = opening.swap(false, std::sync::atomic::Ordering::AcqRel);
                    if let (Some(k), false) = (&keep, first) {
                        let _ = k.delete_expired();
                    }
                    // Timers and delayed messages of every process are delivered here from
                    // now on.
                    timers.host();
                });
                services.push(Arc::new(
                    LeaderRole::new(Arc::clone(&seat), take_over, duties)
                        .reporting_to(Arc::clone(&on_panic)),
                ));
                leader = Some(seat);
            }
            None => services.extend(duties),
        }
        retention = keep;
        flush = Some(f);
        reput = Some(r);
        if let Some(root) = root {
            geometry::record(root, &decided, config.file_mode)?;
            lock::create_abort(root, config.file_mode)?;
        }
        if let Some(l) = &store_lock {
            l.record_holder()?;
            // The first shared opener, recovered and mapped: others may attach now.
            if shared && settle {
                l.share()?;
            }
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

    let config_shared = config.shared_writers;
    let inner = Arc::new(Inner {
        config,
        geometry: decided.geometry,
        max_message_size: decided.max_message_size,
        root: root.map(Path::to_path_buf),
        commit_log,
        index,
        derived,
        key_index,
        hooks_want: super::hooks::wanted(&put_hooks),
        hooks: put_hooks,
        timers: writable.then_some(Arc::clone(&timers)),
        txns,
        topics,
        checkpoint,
        reput,
        flush,
        retention,
        leader,
        preparer,
        notifier,
        wake,
        lock: Mutex::new(store_lock),
        services: crate::service::Services::reporting_to(Arc::clone(&on_panic)),
        delivery: crate::service::Services::reporting_to(on_panic),
        closed: AtomicBool::new(false),
        fork_gen,
        recovery: report,
        uniq: Arc::new(UniqueIdGenerator::new(seed())),
        last_release: std::sync::atomic::AtomicI64::new(0),
        last_read_file: std::sync::atomic::AtomicU64::new(u64::MAX),
        // The files were just loaded.
        last_follow: std::sync::atomic::AtomicU64::new(super::follow::monotonic_ms()),
        follow_end: std::sync::atomic::AtomicU64::new(0),
    });
    timers.attach(Arc::downgrade(&inner));
    if let Some(shm) = inner.commit_log.shared() {
        // Shared writers: the puts of every process wake the leader's timer thread.
        timers.share(Arc::clone(shm));
    }
    inner.services.start(services)?;
    // Delivery runs in one process only: shared writers leave it to the process chosen to
    // host it (`Store::start_delivery`).
    if writable && !config_shared {
        let started = timers
            .prepare_start()
            .and_then(|()| inner.delivery.start(vec![timers]));
        if let Err(e) = started {
            inner.services.stop_all();
            return Err(e);
        }
    }
    // The first shared opener is alone: it takes the leader byte at once and returns leading
    // (its duties and delivery running), as an exclusive writer does. Bounded: a thread that
    // cannot be started leaves the role to its retries (leader.rs).
    if first_shared {
        if let Some(seat) = &inner.leader {
            seat.wait_leader(FIRST_LEADER_WAIT);
        }
    }
    drop(opening);
    Ok(Store { inner, owner: true })
}

/// A later shared opener's mapping: the first opener's, which must be valid for this process.
fn attach_shared(root: &Path) -> Result<WriterShm> {
    match WriterShm::attach(root)? {
        Attached::Valid(shm) => Ok(shm),
        // Only the first opener builds it, and it is open: this process cannot share it.
        Attached::Rebuild(why) => Err(Error::StoreLocked {
            path: root.to_path_buf(),
            holder: Some(format!(
                "writer processes whose shared mapping this process cannot use ({why})"
            )),
        }),
    }
}

/// The first shared opener's mapping, built from what recovery and dispatch left.
/// The whole log counts as flushed after a clean close (the close flushed it), so the first
/// leader's take-over flush maps no file; after a crash, from what this process knows durable.
fn build_shared(
    root: &Path,
    log: &CommitLog,
    config: &StoreConfig,
    abnormal: bool,
) -> Result<WriterShm> {
    let (queues, last_ts) = {
        let a = log.lock_appender();
        (a.queue_entries(), a.last_store_ts())
    };
    let topics = queues
        .iter()
        .map(|(t, _, _)| t.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len();
    let end = log.max_offset();
    let initial = Initial {
        log_end: end,
        dispatched: end,
        flushed: if abnormal {
            log.flushed_offset().min(end)
        } else {
            end
        },
        last_store_timestamp: last_ts.max(log.last_store_timestamp()),
        queues,
    };
    WriterShm::create(
        root,
        Capacity::for_counts(topics, initial.queues.len()),
        &initial,
        config.dir_mode,
        config.file_mode,
    )
}

fn seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

/// Used fraction of the file system holding `dir`; `None` when it cannot be read (retention
/// then deletes by age only).
fn disk_usage(dir: &Path) -> Option<f64> {
    let file = std::fs::File::open(dir).ok()?;
    let (total, used) = crate::mapped_file::mmap::disk_usage(&file).ok()?;
    // Byte counts far below 2^53: the ratio is exact enough.
    #[allow(clippy::cast_precision_loss)]
    (total > 0).then(|| used as f64 / total as f64)
}
