//! Panics inside a simulated run (in any of its tasks: tokio keeps a
//! panicking task's runtime going) are findings: recorded per thread while
//! a run is on it, and reported as violations instead of printed.

use std::cell::{Cell, RefCell};
use std::sync::Once;

thread_local! {
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static CAUGHT: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
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
                    CAUGHT.with(|c| c.borrow_mut().push(format!("{msg}{at}")));
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
    }
}

/// The panics recorded on this thread since the capture started.
pub(crate) fn take() -> Vec<String> {
    CAUGHT.with(|c| std::mem::take(&mut *c.borrow_mut()))
}
