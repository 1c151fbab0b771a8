use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// Manages a collection of threads.
///
/// A new thread is created every time all the existing threads are full.
/// Any idle thread will automatically die after a few seconds.
pub struct TaskPool {
    sharing: Arc<Sharing>,
}

struct Sharing {
    // list of the tasks to be done by worker threads
    todo: Mutex<VecDeque<Box<dyn FnMut() + Send>>>,

    // condvar that will be notified whenever a task is added to `todo`
    condvar: Condvar,

    // number of total worker threads running
    active_tasks: AtomicUsize,

    // number of idle worker threads
    waiting_tasks: AtomicUsize,

    min_threads: usize,

    // (trigd patch) stack size of each thread
    stack_size: usize,
}

/// Minimum number of active threads.
// (trigd patch) the number of idle threads kept is a field, `min_threads`
//  (upstream: a constant 4)

struct Registration<'a> {
    nb: &'a AtomicUsize,
    // (trigd patch) already unregistered by `leave_above`
    left: bool,
}

impl<'a> Registration<'a> {
    fn new(nb: &'a AtomicUsize) -> Registration<'a> {
        nb.fetch_add(1, Ordering::Release);
        Registration { nb, left: false }
    }

    /// (trigd patch) Unregister now if more than `min` are registered,
    ///  deciding and counting in one step; whether it did. Threads that
    ///  time out together cannot all leave: `min` of them stay.
    fn leave_above(&mut self, min: usize) -> bool {
        self.left = self
            .nb
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > min).then(|| n - 1)
            })
            .is_ok();
        self.left
    }
}

impl<'a> Drop for Registration<'a> {
    fn drop(&mut self) {
        if !self.left {
            self.nb.fetch_sub(1, Ordering::Release);
        }
    }
}

impl TaskPool {
    /// (trigd patch) `min_threads` idle threads are kept; each thread has a
    ///  stack of `stack_size` bytes.
    pub fn new(min_threads: usize, stack_size: usize) -> TaskPool {
        let pool = TaskPool {
            sharing: Arc::new(Sharing {
                todo: Mutex::new(VecDeque::new()),
                condvar: Condvar::new(),
                active_tasks: AtomicUsize::new(0),
                waiting_tasks: AtomicUsize::new(0),
                min_threads,
                stack_size,
            }),
        };

        for _ in 0..min_threads {
            pool.add_thread(None)
        }

        pool
    }

    /// Executes a function in a thread.
    /// If no thread is available, spawns a new one.
    pub fn spawn(&self, code: Box<dyn FnMut() + Send>) {
        let mut queue = self.sharing.todo.lock().unwrap();

        // (trigd patch) queue the task only if an idle thread is left for
        //  it: threads already woken for earlier queued tasks still count as
        //  waiting until they run. The old test (`waiting == 0`) queued new
        //  connections behind threads that then kept their keep-alive
        //  connections forever, so those connections were never served.
        if self.sharing.waiting_tasks.load(Ordering::Acquire) > queue.len() {
            queue.push_back(code);
            self.sharing.condvar.notify_one();
        } else {
            drop(queue);
            self.add_thread(Some(code));
        }
    }

    fn add_thread(&self, initial_fn: Option<Box<dyn FnMut() + Send>>) {
        let sharing = self.sharing.clone();

        // (trigd patch) the stack size is the application's
        //  (`ServerLimits::thread_stack`); a failed spawn (thread limit)
        //  drops the task (the connection closes) instead of panicking the
        //  accept thread.
        let stack_size = self.sharing.stack_size;
        let spawned = thread::Builder::new().stack_size(stack_size).spawn(move || {
            let sharing = sharing;
            let mut active_guard = Registration::new(&sharing.active_tasks);

            if let Some(mut f) = initial_fn {
                f();
            }

            loop {
                let mut task: Box<dyn FnMut() + Send> = {
                    let mut todo = sharing.todo.lock().unwrap();

                    let task;
                    loop {
                        if let Some(poped_task) = todo.pop_front() {
                            task = poped_task;
                            break;
                        }
                        let _waiting_guard = Registration::new(&sharing.waiting_tasks);

                        let received =
                            if sharing.active_tasks.load(Ordering::Acquire) <= sharing.min_threads {
                                todo = sharing.condvar.wait(todo).unwrap();
                                true
                            } else {
                                let (new_lock, waitres) = sharing
                                    .condvar
                                    .wait_timeout(todo, Duration::from_millis(5000))
                                    .unwrap();
                                todo = new_lock;
                                !waitres.timed_out()
                            };

                        // (trigd patch) only while more than `min_threads`
                        //  threads are active (upstream: every thread that
                        //  timed out left, so after a burst the pool fell
                        //  below `min_threads`, often to none)
                        if !received
                            && todo.is_empty()
                            && active_guard.leave_above(sharing.min_threads)
                        {
                            return;
                        }
                    }

                    task
                };

                task();
            }
        });
        if let Err(e) = spawned {
            log::error!("cannot start a connection thread: {}", e);
        }
    }
}

impl Drop for TaskPool {
    fn drop(&mut self) {
        self.sharing
            .active_tasks
            .store(999_999_999, Ordering::Release);
        self.sharing.condvar.notify_all();
    }
}
