//! The queue's bookkeeping without threads or processes: hand-on order,
//! per-function limits, slots freed.

use super::*;

fn ticket(program: u64, function: &str, concurrency: usize) -> Arc<Ticket> {
    Arc::new(Ticket {
        key: (program, function.to_string()),
        concurrency,
        granted: AtomicBool::new(false),
        wake: Condvar::new(),
    })
}

fn granted(t: &Arc<Ticket>) -> bool {
    t.granted.load(Ordering::SeqCst)
}

#[test]
fn a_freed_slot_goes_to_the_first_waiter_in_order() {
    let mut s = Slots {
        max: 1,
        ..Slots::default()
    };
    let a = (1, "a".to_string());
    s.take(&a);
    let (first, second) = (ticket(1, "b", 9), ticket(1, "c", 9));
    s.queue.push_back(Waiter::Sync(Arc::clone(&first)));
    s.queue.push_back(Waiter::Sync(Arc::clone(&second)));
    assert!(s.fill().is_empty() && !granted(&first), "no free slot yet");
    let (next, freed) = s.release(&a);
    assert!(next.is_none() && !freed, "the slot is handed on, not freed");
    assert!(granted(&first) && !granted(&second));
    assert_eq!(s.used, 1);
    let (_, freed) = s.release(&(1, "b".to_string()));
    assert!(!freed && granted(&second));
    let (_, freed) = s.release(&(1, "c".to_string()));
    assert!(freed, "nobody waits: the slot is freed");
    assert_eq!((s.used, s.per_fn.len()), (0, 0));
}

#[test]
fn a_function_at_its_limit_does_not_hold_up_the_others() {
    let mut s = Slots {
        max: 2,
        ..Slots::default()
    };
    let a = (1, "a".to_string());
    s.take(&a);
    let (same, other) = (ticket(1, "a", 1), ticket(1, "b", 1));
    s.queue.push_back(Waiter::Sync(Arc::clone(&same)));
    s.queue.push_back(Waiter::Sync(Arc::clone(&other)));
    assert!(s.fill().is_empty());
    assert!(!granted(&same), "function a runs at its concurrency of 1");
    assert!(
        granted(&other),
        "the free slot goes to the next runnable waiter"
    );
    let (_, freed) = s.release(&a);
    assert!(!freed && granted(&same));
    assert_eq!(s.used, 2);
}

#[test]
fn a_stopping_queue_hands_nothing_on() {
    let mut s = Slots {
        max: 1,
        ..Slots::default()
    };
    let a = (1, "a".to_string());
    s.take(&a);
    let t = ticket(1, "a", 9);
    s.queue.push_back(Waiter::Sync(Arc::clone(&t)));
    s.stopping = true;
    let (_, freed) = s.release(&a);
    assert!(freed && !granted(&t));
}
