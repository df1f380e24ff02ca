//! PostMark's shape (v1.5, as Featherstitch §8.1 ran it): make a pool of
//! files, run transactions that each create or delete one file and may
//! append to another, then delete the pool. One transaction mix over any
//! file system that implements [`Target`]: the synthetic patch generator
//! (`bench optimizations`) and diskfs (`bench modes`), so both benchmarks
//! run the same sequence of operations for a seed. PostMark's reads are
//! left out: they would hit the cache and state no dependencies.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The load's size.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub files: usize,
    pub transactions: usize,
    /// File sizes are uniform in 500 B ..= this.
    pub max_size: u64,
}

/// A file system PostMark runs on.
pub trait Target {
    type File;
    type Error;
    /// Creates a file of `size` bytes.
    fn create(&mut self, size: u64) -> Result<Self::File, Self::Error>;
    fn delete(&mut self, f: Self::File) -> Result<(), Self::Error>;
    /// Appends `len` bytes to `f`.
    fn append(&mut self, f: &mut Self::File, len: usize) -> Result<(), Self::Error>;
    /// Called after every operation: a periodic write-back, when one is due.
    fn tick(&mut self) -> Result<(), Self::Error>;
}

/// Runs the load; the caller syncs after.
pub fn run<T: Target>(t: &mut T, shape: &Shape, rng: &mut ChaCha8Rng) -> Result<(), T::Error> {
    let size = |rng: &mut ChaCha8Rng| rng.gen_range(500..=shape.max_size);
    let mut pool = Vec::new();
    for _ in 0..shape.files {
        pool.push(t.create(size(rng))?);
        t.tick()?;
    }
    for _ in 0..shape.transactions {
        if rng.gen_bool(0.5) {
            pool.push(t.create(size(rng))?);
        } else if !pool.is_empty() {
            let f = pool.swap_remove(rng.gen_range(0..pool.len()));
            t.delete(f)?;
        }
        if rng.gen_bool(0.5) && !pool.is_empty() {
            let i = rng.gen_range(0..pool.len());
            t.append(&mut pool[i], rng.gen_range(1..=4096))?;
        }
        t.tick()?;
    }
    for f in pool {
        t.delete(f)?;
        t.tick()?;
    }
    Ok(())
}
