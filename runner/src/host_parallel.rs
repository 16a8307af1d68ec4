//! The host's share of a run on every core: an [`Executor`] for the float64 reference's pieces
//! (`hopfuse::backend::reference::evaluate_with`), and chunked maps for the runner's own per-element
//! work (decoding outputs). The compiler cuts the reference into pieces by shape alone, so the
//! threads change how fast it is, never what it computes.

use hopfuse::backend::reference::{Executor, Piece};
use std::sync::Mutex;

/// Runs pieces on up to `threads` scoped threads, each taking the next piece from a shared
/// queue.
#[derive(Clone, Copy, Debug)]
pub struct Threads {
    pub threads: usize,
}

impl Threads {
    /// One thread per core.
    pub fn all() -> Threads {
        Threads {
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }

    /// Runs `f(i, chunk)` over `chunk`-element pieces of `items` on the threads.
    pub fn for_chunks<T: Send>(
        &self,
        items: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let f = &f;
        let pieces = items
            .chunks_mut(chunk.max(1))
            .enumerate()
            .map(|(i, c)| Box::new(move || f(i, c)) as Piece)
            .collect();
        self.run(pieces);
    }
}

impl Executor for Threads {
    fn run<'a>(&self, pieces: Vec<Piece<'a>>) {
        let threads = self.threads.min(pieces.len());
        if threads <= 1 {
            pieces.into_iter().for_each(|p| p());
            return;
        }
        let queue = Mutex::new(pieces.into_iter());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let next = queue.lock().expect("piece queue").next();
                    match next {
                        Some(piece) => piece(),
                        None => return,
                    }
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_piece_runs_once() {
        let count = AtomicUsize::new(0);
        let pieces: Vec<Piece> = (0..1000)
            .map(|_| {
                Box::new(|| {
                    count.fetch_add(1, Ordering::Relaxed);
                }) as Piece
            })
            .collect();
        Threads { threads: 4 }.run(pieces);
        assert_eq!(count.load(Ordering::Relaxed), 1000);
        let mut v = vec![0usize; 10_001];
        Threads { threads: 3 }.for_chunks(&mut v, 100, |i, c| {
            for (j, x) in c.iter_mut().enumerate() {
                *x = i * 100 + j;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i));
    }
}
