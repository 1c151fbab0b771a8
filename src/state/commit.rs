//! Group commit of the run log: concurrent durable appends (async accepts,
//! synced cancels) wait on one `fdatasync` that covers all of them.
//!
//! Leader and followers: the first caller whose line is not yet on disk
//! becomes the leader; it notes how far the log has been written, syncs
//! without holding the lock, records the new durable point and wakes
//! everyone. Whoever arrived meanwhile waits on the condition variable; a
//! waiter whose line the leader's sync covered returns without a sync of
//! its own, the others elect the next leader, whose one sync covers every
//! line written during the previous one.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The durable point of one file and who is syncing it.
struct Point {
    /// The file synced (replaced when a compaction renames a new log in).
    file: Arc<File>,
    /// Highest line sequence number known to be on disk.
    synced: u64,
    /// A leader is syncing, or a compaction is swapping the file.
    busy: bool,
}

/// The group commit of one append-only file.
pub struct GroupCommit {
    point: Mutex<Point>,
    turn: Condvar,
    /// `fdatasync` calls made (`trigd_state_fsyncs_total`).
    syncs: AtomicU64,
}

impl GroupCommit {
    /// The group commit of `file`, nothing written to it yet.
    pub fn new(file: File) -> GroupCommit {
        GroupCommit {
            point: Mutex::new(Point {
                file: Arc::new(file),
                synced: 0,
                busy: false,
            }),
            turn: Condvar::new(),
            syncs: AtomicU64::new(0),
        }
    }

    /// Return once line `seq` and every line before it are on disk;
    /// `written` says the sequence number of the last line written now.
    ///
    /// Speed trick (DESIGN §11): one `fdatasync` serves every caller that
    /// wrote its line before the sync began, and the callers that arrive
    /// during it share the next. Figure (async accepts on 32 connections,
    /// 5 s, static build, 2-core VM shared with other builds at load 5–8,
    /// interleaved; re-measure: `BENCH_ONLY=async bench/run.sh`
    /// and `perf stat -e syscalls:sys_enter_fdatasync -p PID`): 0.07–0.11
    /// syncs per accepted run and 1,730–1,990 accepted/s, against
    /// 0.19–0.24 and 950–1,310/s for the sync under one mutex it replaced
    /// (whose waiters woke one at a time, each syncing again for the few
    /// lines written meanwhile); one sync per accept would add a disk
    /// flush to every answer. `trigd_state_fsyncs_total` counts the syncs;
    /// `queue::concurrent_async_accepts_share_fsyncs` checks that 320
    /// concurrent accepts take fewer than 320.
    ///
    /// # Errors
    /// The sync failed; the line may not be on disk.
    pub fn sync_upto(&self, seq: u64, written: impl Fn() -> u64) -> io::Result<()> {
        let mut p = self.lock();
        loop {
            if p.synced >= seq {
                return Ok(());
            }
            if !p.busy {
                break;
            }
            p = self.turn.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        // Leader: sync without the lock, so that followers can queue.
        p.busy = true;
        let file = Arc::clone(&p.file);
        drop(p);
        let target = written();
        let synced = file.sync_data();
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let mut p = self.lock();
        p.busy = false;
        if synced.is_ok() {
            p.synced = p.synced.max(target);
        }
        drop(p);
        self.turn.notify_all();
        synced
    }

    /// Run `swap` with no sync in flight and none starting (a compaction
    /// renaming a new file in): it returns the new file, every line of
    /// which (up to the sequence number it returns) is on disk.
    ///
    /// # Errors
    /// What `swap` returned; the old file stays.
    pub fn swap<T>(&self, swap: impl FnOnce() -> io::Result<(File, u64, T)>) -> io::Result<T> {
        let mut p = self.lock();
        while p.busy {
            p = self.turn.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        p.busy = true;
        drop(p);
        let swapped = swap();
        let mut p = self.lock();
        p.busy = false;
        let out = swapped.map(|(file, synced, out)| {
            p.file = Arc::new(file);
            p.synced = p.synced.max(synced);
            out
        });
        drop(p);
        self.turn.notify_all();
        out
    }

    /// `fdatasync` calls made so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Point> {
        self.point.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_dir::TestDir;
    use std::sync::Barrier;
    use std::thread;

    /// A new file `name` in `dir`.
    fn file(dir: &TestDir, name: &str) -> File {
        File::create(dir.join(name)).unwrap()
    }

    /// 16 lines written, then their 16 writers wait durable at once: the
    /// first to lead syncs up to the last line written, so one sync
    /// covers all 16 (whoever comes after it finds its line covered).
    #[test]
    fn one_sync_covers_every_line_written_before_it() {
        let dir = TestDir::new("commit-one");
        let gc = Arc::new(GroupCommit::new(file(&dir, "log")));
        let seq = Arc::new(AtomicU64::new(0));
        let go = Arc::new(Barrier::new(16));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (gc, seq, go) = (Arc::clone(&gc), Arc::clone(&seq), Arc::clone(&go));
                thread::spawn(move || {
                    let mine = seq.fetch_add(1, Ordering::SeqCst) + 1;
                    go.wait();
                    gc.sync_upto(mine, || seq.load(Ordering::SeqCst)).unwrap();
                    assert!(gc.lock().synced >= mine);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(gc.syncs(), 1);
    }

    /// Lines keep coming while syncs run: every waiter comes back covered,
    /// never with more syncs than lines; a swap in the middle keeps the
    /// durable point.
    #[test]
    fn waiters_during_syncs_and_a_swap_are_each_covered() {
        let dir = TestDir::new("commit-many");
        let gc = Arc::new(GroupCommit::new(file(&dir, "log")));
        let seq = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gc, seq) = (Arc::clone(&gc), Arc::clone(&seq));
                thread::spawn(move || {
                    for _ in 0..50 {
                        let mine = seq.fetch_add(1, Ordering::SeqCst) + 1;
                        gc.sync_upto(mine, || seq.load(Ordering::SeqCst)).unwrap();
                        assert!(gc.lock().synced >= mine);
                    }
                })
            })
            .collect();
        let now = gc
            .swap(|| Ok((file(&dir, "swapped"), seq.load(Ordering::SeqCst), ())))
            .map(|()| seq.load(Ordering::SeqCst));
        assert!(now.is_ok());
        for t in threads {
            t.join().unwrap();
        }
        assert!(gc.syncs() <= 400, "{} syncs for 400 lines", gc.syncs());
    }
}
