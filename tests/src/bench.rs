//! Benchmark support.

use std::time::Instant;

/// Runs `run` three times: the shortest time in seconds, and what the last
/// run returned.
pub fn best_of_three(run: &dyn Fn() -> u64) -> (f64, u64) {
    let mut best = f64::INFINITY;
    let mut result = 0;
    for _ in 0..3 {
        let start = Instant::now();
        result = run();
        best = best.min(start.elapsed().as_secs_f64());
    }
    (best, result)
}
