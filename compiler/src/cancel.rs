//! Cancellation of compiles under way: a flag shared between the compiles a caller runs and
//! whoever waits for them (the service sets it when a compile's deadline passes).
//!
//! The caller runs its work inside [`Cancel::scope`]; every [`crate::compile`] on that thread
//! checks the flag before each schedule statement, before each pass and before code
//! generation, so a cancelled compile returns within one statement or pass (each bounded by
//! the compiler's limits) with [`Cancel::error`] instead of finishing work nobody will read.
//! A scope rather than an option, so that every path that compiles on the service's behalf (a
//! check, an inspection's variants, a run's specialisation) stops without passing a flag down
//! each; a flag rather than a deadline, because the compiler also runs in the page (wasm32),
//! which has no clock it may read.

use crate::diag::Diagnostic;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cancellation flag; clones share it. The default is a flag nobody has set.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

thread_local! {
    /// The flags of the scopes this thread is in, innermost last.
    static SCOPES: RefCell<Vec<Cancel>> = const { RefCell::new(Vec::new()) };
}

impl Cancel {
    /// Asks every compile in a scope of this flag to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Runs `work` with this flag watched by every compile it makes on this thread.
    pub fn scope<T>(&self, work: impl FnOnce() -> T) -> T {
        SCOPES.with(|s| s.borrow_mut().push(self.clone()));
        // Popped on unwinding too: the thread (a pool's) outlives a panicking compile.
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                SCOPES.with(|s| s.borrow_mut().pop());
            }
        }
        let _pop = Pop;
        work()
    }

    /// `Err(Cancel::error())` once the flag of any scope this thread is in is set.
    pub fn check() -> Result<(), Diagnostic> {
        let cancelled = SCOPES.with(|s| s.borrow().iter().any(Cancel::is_cancelled));
        if cancelled {
            Err(Cancel::error())
        } else {
            Ok(())
        }
    }

    /// What a cancelled compile returns.
    pub fn error() -> Diagnostic {
        Diagnostic::new(
            format!("{CANCELLED}: its deadline passed before it finished"),
            None,
        )
    }
}

/// The start of [`Cancel::error`]'s message.
pub const CANCELLED: &str = "the compile was stopped";

#[cfg(test)]
mod tests {
    use super::Cancel;

    #[test]
    fn a_scope_sees_its_flag_and_ends_with_its_work() {
        assert!(Cancel::check().is_ok());
        let flag = Cancel::default();
        flag.scope(|| {
            assert!(Cancel::check().is_ok());
            Cancel::default().scope(|| {
                flag.cancel();
                assert!(Cancel::check().is_err(), "an outer scope's flag counts");
            });
            assert!(Cancel::check().is_err());
        });
        assert!(Cancel::check().is_ok(), "outside every scope");
        let panicked = std::panic::catch_unwind(|| flag.scope(|| panic!("a compiler bug")));
        assert!(panicked.is_err());
        assert!(Cancel::check().is_ok(), "the scope ended with the panic");
    }
}
