//! The bundle's traces, served to clients that decode them themselves
//! (LLDB's `thread trace dump`, GDB's `record instruction-history`) once
//! they ask for tracing: the trace is recorded already, and starting it
//! serves it.

use super::SavedTrace;
use crate::inferior::{CpuInfo, InferiorError, TraceOps, TraceStart, TraceState, TraceStatus, TRACING_UNSUPPORTED};

impl TraceOps for SavedTrace {
    /// The trace is recorded already: starting it again (LLDB's `process
    /// trace start`, GDB's `record btrace pt`) serves it.
    fn trace_start(&mut self, request: &TraceStart) -> Result<(), InferiorError> {
        let () = match &request.threads {
            Some(threads) => match threads.iter().find(|&&t| !self.traces.iter().any(|(tid, _)| *tid == t)) {
                Some(missing) => Err(InferiorError::InvalidRequest(format!("Thread {missing} was not recorded in the saved trace"))),
                None => Ok(()),
            },
            None => Ok(()),
        }?;
        if self.trace_served {
            return Err(InferiorError::Refused("Process currently traced. Stop process tracing first".into()));
        }
        self.trace_served = true;
        Ok(())
    }

    /// The saved trace is no longer offered (it stays replayable).
    fn trace_stop(&mut self, _threads: Option<&[u64]>) -> Result<(), InferiorError> {
        self.trace_served = false;
        Ok(())
    }

    fn trace_state(&self) -> Result<TraceState, InferiorError> {
        let served = self.traces.iter().filter(|_| self.trace_served);
        Ok(TraceState {
            threads: served.map(|(tid, trace)| (*tid, trace.len())).collect(),
            tsc_conversion: self.tsc_conversion,
        })
    }

    fn trace_data(&mut self, tid: u64) -> Result<Vec<u8>, InferiorError> {
        self.traces.iter().find(|(t, _)| *t == tid).map(|(_, trace)| trace.to_vec()).ok_or_else(|| InferiorError::InvalidRequest(format!("Thread {tid} not traced")))
    }

    fn trace_cpu(&self) -> CpuInfo {
        self.cpu.clone()
    }

    fn trace_status(&self) -> Result<TraceStatus, InferiorError> {
        Err(InferiorError::Unsupported(TRACING_UNSUPPORTED))
    }

    fn trace_recorder(&mut self, _name: &str) -> Result<(), InferiorError> {
        Err(InferiorError::Unsupported(TRACING_UNSUPPORTED))
    }
}
