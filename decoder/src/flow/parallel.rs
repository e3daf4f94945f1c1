//! Parallel decoding: a trace cut at PSBs into ranges of about equal size,
//! each decoded by its own [`FlowDecoder`], the histories joined.

use super::{FlowDecoder, FlowOptions};
use crate::history::History;
use crate::image::Memory;

/// Decodes `trace` on up to `threads` threads: the trace is cut at PSBs into
/// contiguous ranges, each decoded independently (a PSB+ restates all the
/// state a decoder needs, and nothing — TNT bits, return compression — crosses
/// a PSB), and the histories are joined. The result equals
/// [`FlowDecoder::decode_history`]'s.
pub fn decode_parallel<M: Memory + Sync>(trace: &[u8], memory: &M, threads: usize) -> History {
    decode_parallel_with(trace, memory, threads, FlowOptions::default())
}

/// [`decode_parallel`] with [`FlowOptions`].
pub fn decode_parallel_with<M: Memory + Sync>(trace: &[u8], memory: &M, threads: usize, options: FlowOptions) -> History {
    let psbs: Vec<usize> = crate::packet::sync::psb_offsets(trace).collect();
    let threads = threads.max(1).min(psbs.len().max(1));
    if threads <= 1 || psbs.len() < 2 {
        return FlowDecoder::new(trace, memory).with_options_and_psbs(options, Some(&psbs)).decode_history();
    }
    // Contiguous ranges of PSB segments, of about equal byte size.
    let mut cuts = vec![0usize];
    for t in 1..threads {
        let target = trace.len() * t / threads;
        let index = psbs.partition_point(|&p| p < target).min(psbs.len() - 1);
        if index > *cuts.last().unwrap() {
            cuts.push(index);
        }
    }
    let ranges: Vec<(usize, Option<usize>)> = cuts
        .iter()
        .enumerate()
        .map(|(i, &first)| (psbs[first], cuts.get(i + 1).map(|&next| psbs[next])))
        .collect();
    let histories: Vec<History> = std::thread::scope(|scope| {
        let workers: Vec<_> = ranges
            .iter()
            .map(|&(start, stop)| {
                let psbs = &psbs;
                scope.spawn(move || FlowDecoder::for_segment(trace, memory, start, stop).with_options_and_psbs(options, Some(psbs)).decode_history())
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("decoder thread")).collect()
    });
    let mut histories = histories.into_iter();
    let mut joined = histories.next().unwrap_or_default();
    let mut covered = !joined.stopped_at_segment_end();
    for history in histories {
        // A segment that ran past its end covered the rest of the trace.
        if covered {
            break;
        }
        covered = !history.stopped_at_segment_end();
        joined.append(history);
    }
    joined
}
