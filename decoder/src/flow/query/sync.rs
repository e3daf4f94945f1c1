//! Synchronisation: a PSB+ read (its status packets, the state it sets),
//! an overflow, and resynchronising at the next usable PSB after damage.

use super::*;

impl<'a> QueryDecoder<'a> {
    /// Reads the PSB+ header after a PSB at `offset`; returns the FUP IP
    /// (tracing on) or `None` (tracing off).
    pub(in crate::flow) fn psb_plus(&mut self, log: &mut impl EventLog, offset: usize) -> Flow<Option<u64>> {
        self.held_disable = None;
        // A new slice: whatever ended the last one (also on a path where
        // tracing stayed off) is behind.
        self.trace_ends = false;
        self.slice_ended = false;
        // The same header checks wherever a PSB+ is met (read ahead, synced
        // to, or reached while tracing is off).
        read_psb_header(&mut self.packets.clone(), offset)?;
        // Nothing crosses a PSB (LLDB decodes each PSB-to-PSB slice with a
        // fresh decoder): the mode is the header's, or unknown.
        self.mode = None;
        self.tip_queue.clear();
        let mut ip = None;
        let mut header_tsc = false;
        loop {
            let before = self.packets.clone();
            let packet = match next_packet(&mut self.packets) {
                Ok(Some((_, packet))) => packet,
                Ok(None) => return Err((self.packets.offset(), FlowError::Mismatch { expected: "PSBEND before the end of the trace", ip: None })),
                Err(e) => return Err((e.offset, FlowError::Packet(e.kind, None))),
            };
            match packet {
                Packet::Psbend => break,
                Packet::Tsc(tsc) => {
                    self.tick(tsc);
                    header_tsc = true;
                }
                Packet::Fup(fup) => ip = fup.ip,
                Packet::ModeExec { csl, csd, .. } => self.mode = ExecMode::from_mode_exec(csl, csd),
                Packet::Ovf => {
                    // An overflow inside PSB+ ends the header, as PSBEND
                    // does (libipt's OVF carries its psbend flag): the slice
                    // is synchronised, then the overflow is decoded as the
                    // next packet.
                    self.packets = before;
                    break;
                }
                _ => {}
            }
        }
        if self.options.lldb_psb_slices && !header_tsc {
            // LLDB decodes the slice with a fresh decoder, which knows no
            // time until a TSC; it announces the slice's TSC (the first one
            // an event after the PSB carries) before the sync point.
            self.slice_time_unknown = false;
            if let Some(tsc) = self.slice_tsc_ahead() {
                self.notify_time_at(log, Some(tsc));
            }
            self.time = None;
            self.slice_time_unknown = true;
        } else {
            self.slice_time_unknown = false;
            self.notify_time(log);
        }
        log.event(Event::SyncPoint(offset));
        self.tnt_len = 0;
        Ok(ip)
    }

    /// Recovers from an overflow (the OVF at `offset` already consumed), as
    /// libipt does: an error item; TNT bits and the return stack are gone;
    /// if a FUP follows with only timing packets between, tracing resumed
    /// at its IP, otherwise it resumed disabled (a TIP.PGE or PSB+ says
    /// where it starts again).
    pub(in crate::flow) fn overflow(&mut self, log: &mut impl EventLog, offset: usize) -> Flow<Next> {
        self.notify_time(log);
        log.error(offset, FlowError::Overflow);
        self.tnt_len = 0;
        loop {
            let Some((at, packet)) = (match next_packet(&mut self.packets) {
                Ok(item) => item,
                Err(e) => return Err((e.offset, FlowError::Packet(e.kind, None))),
            }) else {
                return Ok(Next::End);
            };
            match packet {
                Packet::Fup(fup) => return Ok(fup.ip.map_or(Next::Disabled, Next::At)),
                Packet::Tsc(tsc) => self.tick(tsc),
                // The overflow resolved with tracing off: libipt binds it to
                // the next TIP.PGE and skips what does not depend on
                // PacketEn, a TIP.PGD included (LLDB 22 prints nothing for
                // it, where a TIP.PGD met while disabled is otherwise an
                // error; seen on corrupted walk 1206).
                Packet::TipPgd(_) => {}
                Packet::Pad
                | Packet::Mnt(_)
                | Packet::Cbr(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_) => {}
                other => {
                    self.peeked = Some((at, other));
                    return Ok(Next::Disabled);
                }
            }
        }
    }

    pub(in crate::flow) fn resync(&mut self, log: &mut impl EventLog) -> bool {
        self.slice_cut = false;
        self.slice_ended = false;
        self.held_disable = None;
        self.cut_packet = None;
        self.tnt_len = 0;
        self.rejected_event = None;
        self.trace_ends = false;
        self.tip_queue.clear();
        self.mode = None;
        let synced = match self.peeked.take() {
            // A PSB already read ahead is the next sync point.
            Some((offset, Packet::Psb)) => self.packets.sync_set(offset),
            Some((offset, _)) => {
                self.packets.seek(offset);
                self.packets.sync_forward().is_some()
            }
            None => self.packets.sync_forward().is_some(),
        };
        synced && self.usable_sync_point(log)
    }

    /// Whether the PSB at the current position starts a usable PSB+ (within
    /// this decoder's segment). A damaged header is an error item and the
    /// next PSB is tried: libipt fails to synchronise there and LLDB stops
    /// decoding the thread, retrace goes on.
    pub(in crate::flow) fn usable_sync_point(&mut self, log: &mut impl EventLog) -> bool {
        loop {
            let psb = self.packets.offset();
            if self.at_stop(psb) {
                return false;
            }
            let mut ahead = self.packets.clone();
            let header = match next_packet(&mut ahead) {
                Ok(Some((_, Packet::Psb))) => read_psb_header(&mut ahead, psb),
                _ => Ok(true),
            };
            match header {
                Ok(_) => return true,
                Err((offset, error)) => {
                    log.error(offset, error);
                    if self.packets.sync_forward().is_none() {
                        return false;
                    }
                }
            }
        }
    }
}
