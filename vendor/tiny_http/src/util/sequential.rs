use std::io::Result as IoResult;
use std::io::{Read, Write};

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use std::mem;

pub struct SequentialReaderBuilder<R>
where
    R: Read + Send,
{
    inner: SequentialReaderBuilderInner<R>,
}

enum SequentialReaderBuilderInner<R>
where
    R: Read + Send,
{
    First(R),
    NotFirst(Arc<Handoff<R>>),
}

pub struct SequentialReader<R>
where
    R: Read + Send,
{
    inner: SequentialReaderInner<R>,
    next: Arc<Handoff<R>>,
}

enum SequentialReaderInner<R>
where
    R: Read + Send,
{
    MyTurn(R),
    Waiting(Arc<Handoff<R>>),
    Empty,
}

pub struct SequentialWriterBuilder<W>
where
    W: Write + Send,
{
    writer: Arc<Mutex<W>>,
    next_trigger: Option<Arc<Handoff<()>>>,
}

pub struct SequentialWriter<W>
where
    W: Write + Send,
{
    trigger: Option<Arc<Handoff<()>>>,
    writer: Arc<Mutex<W>>,
    on_finish: Arc<Handoff<()>>,
}

/// (trigd patch) A value handed from one request's reader (or writer) to
/// the next one's. Upstream used a `std::sync::mpsc` channel, which
/// allocates several blocks per request (one cache-aligned and zeroed);
/// this is one small allocation, and waking happens only when the next
/// one is already waiting (no system call otherwise).
struct Handoff<T> {
    state: Mutex<HandoffState<T>>,
    ready: Condvar,
}

struct HandoffState<T> {
    value: Option<T>,
    waiting: bool,
}

impl<T> Handoff<T> {
    fn new() -> Arc<Handoff<T>> {
        Arc::new(Handoff {
            state: Mutex::new(HandoffState {
                value: None,
                waiting: false,
            }),
            ready: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HandoffState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, value: T) {
        let mut state = self.lock();
        state.value = Some(value);
        if state.waiting {
            drop(state);
            self.ready.notify_one();
        }
    }

    fn recv(&self) -> T {
        let mut state = self.lock();
        loop {
            if let Some(value) = state.value.take() {
                state.waiting = false;
                return value;
            }
            state.waiting = true;
            state = self.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<R: Read + Send> SequentialReaderBuilder<R> {
    pub fn new(reader: R) -> SequentialReaderBuilder<R> {
        SequentialReaderBuilder {
            inner: SequentialReaderBuilderInner::First(reader),
        }
    }
}

impl<W: Write + Send> SequentialWriterBuilder<W> {
    pub fn new(writer: W) -> SequentialWriterBuilder<W> {
        SequentialWriterBuilder {
            writer: Arc::new(Mutex::new(writer)),
            next_trigger: None,
        }
    }
}

impl<R: Read + Send> Iterator for SequentialReaderBuilder<R> {
    type Item = SequentialReader<R>;

    fn next(&mut self) -> Option<SequentialReader<R>> {
        let tx = Handoff::new();

        let inner = mem::replace(
            &mut self.inner,
            SequentialReaderBuilderInner::NotFirst(Arc::clone(&tx)),
        );

        match inner {
            SequentialReaderBuilderInner::First(reader) => Some(SequentialReader {
                inner: SequentialReaderInner::MyTurn(reader),
                next: tx,
            }),

            SequentialReaderBuilderInner::NotFirst(previous) => Some(SequentialReader {
                inner: SequentialReaderInner::Waiting(previous),
                next: tx,
            }),
        }
    }
}

impl<W: Write + Send> Iterator for SequentialWriterBuilder<W> {
    type Item = SequentialWriter<W>;
    fn next(&mut self) -> Option<SequentialWriter<W>> {
        let tx = Handoff::new();
        let mut next_next_trigger = Some(Arc::clone(&tx));
        ::std::mem::swap(&mut next_next_trigger, &mut self.next_trigger);

        Some(SequentialWriter {
            trigger: next_next_trigger,
            writer: self.writer.clone(),
            on_finish: tx,
        })
    }
}

impl<R: Read + Send> SequentialReader<R> {
    /// (trigd patch) The underlying reader, once it is this reader's turn
    /// (waiting for the previous reader as `read` does), so that a caller
    /// can use its `BufRead` side instead of reading a byte per call.
    pub fn get_mut(&mut self) -> &mut R {
        if let SequentialReaderInner::Waiting(ref mut recv) = self.inner {
            let reader = recv.recv();
            self.inner = SequentialReaderInner::MyTurn(reader);
        }
        match self.inner {
            SequentialReaderInner::MyTurn(ref mut reader) => reader,
            _ => unreachable!(),
        }
    }
}

impl<R: Read + Send> Read for SequentialReader<R> {
    // (trigd patch) through `get_mut`: the reader is kept in `self` before
    //  it is used, so a panic while reading still hands it to the next one
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        self.get_mut().read(buf)
    }
}

impl<W: Write + Send> Write for SequentialWriter<W> {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        if let Some(v) = self.trigger.as_mut() {
            v.recv()
        }
        self.trigger = None;

        self.writer.lock().unwrap().write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        if let Some(v) = self.trigger.as_mut() {
            v.recv()
        }
        self.trigger = None;

        self.writer.lock().unwrap().flush()
    }
}

impl<R> Drop for SequentialReader<R>
where
    R: Read + Send,
{
    fn drop(&mut self) {
        let inner = mem::replace(&mut self.inner, SequentialReaderInner::Empty);

        match inner {
            SequentialReaderInner::MyTurn(reader) => {
                self.next.send(reader);
            }
            SequentialReaderInner::Waiting(recv) => {
                let reader = recv.recv();
                self.next.send(reader);
            }
            SequentialReaderInner::Empty => (),
        }
    }
}

impl<W> Drop for SequentialWriter<W>
where
    W: Write + Send,
{
    fn drop(&mut self) {
        self.on_finish.send(());
    }
}
