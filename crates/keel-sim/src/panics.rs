//! Panics inside a simulated run (in any of its tasks: tokio keeps a
//! panicking task's runtime going) are findings: recorded per thread while
//! a run is on it, and reported as violations instead of printed.

use std::cell::{Cell, RefCell};
use std::sync::Once;

use crate::trace::Trace;

thread_local! {
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static CAUGHT: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    /// The trace of the run on this thread, which a panic is written to.
    static TRACE: RefCell<Option<Trace>> = const { RefCell::new(None) };
}

/// Panics on this thread go into `trace` too (at the simulated time they
/// happened), until the capture ends.
pub(crate) fn trace_to(trace: Trace) {
    TRACE.with(|t| *t.borrow_mut() = Some(trace));
}

static HOOK: Once = Once::new();

/// While alive, panics on this thread are recorded, not printed.
pub(crate) struct Capture;

impl Capture {
    pub(crate) fn start() -> Self {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if CAPTURING.with(Cell::get) {
                    let at = info
                        .location()
                        .map(|l| format!(" at {}:{}", l.file(), l.line()))
                        .unwrap_or_default();
                    let msg = info
                        .payload()
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| info.payload().downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "(no message)".to_string());
                    let what = format!("{msg}{at}");
                    // Not while the trace's own lock is held by this thread
                    // (a panic inside `Trace::event` would deadlock on it).
                    TRACE.with(|t| {
                        if let Ok(t) = t.try_borrow() {
                            if let Some(trace) = t.as_ref() {
                                trace.try_event(format_args!("PANIC {what}"));
                            }
                        }
                    });
                    CAUGHT.with(|c| c.borrow_mut().push(what));
                } else {
                    previous(info);
                }
            }));
        });
        CAUGHT.with(|c| c.borrow_mut().clear());
        CAPTURING.with(|c| c.set(true));
        Capture
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.set(false));
        TRACE.with(|t| t.borrow_mut().take());
    }
}

/// The panics recorded on this thread since the capture started.
pub(crate) fn take() -> Vec<String> {
    CAUGHT.with(|c| std::mem::take(&mut *c.borrow_mut()))
}
