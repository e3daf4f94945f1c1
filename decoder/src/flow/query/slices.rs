//! LLDB's PSB slices and the time: where the next slice starts, whether a
//! run crosses one, the TSC a slice starts with, and time events as the
//! trace's timing packets give them.

use super::*;

impl<'a> QueryDecoder<'a> {
    /// Where the next LLDB slice starts when the current one ends here: the
    /// next PSB (peeked, or the one a packet ran into) and the IP its PSB+
    /// gives.
    pub(in crate::flow) fn next_slice_start(&mut self) -> Option<(usize, u64)> {
        match self.peek() {
            Ok(Some((psb, Packet::Psb))) => Some((psb, self.psb_fup_lookahead()?)),
            // A packet ran into the next slice's PSB: the slice ends before it.
            Ok(None) if self.slice_cut => {
                let psb = *self.slice_psbs.get(self.slice_psbs.partition_point(|&psb| psb <= self.packets.offset()))?;
                let mut ahead = self.packets.clone();
                ahead.seek(psb);
                next_packet(&mut ahead).ok()??;
                Some((psb, Self::header_fup(ahead)?))
            }
            _ => None,
        }
    }

    /// With LLDB's slices, whether a packet from `offset` to `end` crosses a
    /// PSB: LLDB's slice ends at that PSB, so for it the packet is cut short
    /// there.
    #[inline]
    pub(in crate::flow) fn crosses_slice_start(&self, offset: usize, end: usize) -> bool {
        let next = self.slice_psbs.partition_point(|&psb| psb <= offset);
        self.slice_psbs.get(next).is_some_and(|&psb| psb < end)
    }

    #[inline]
    pub(in crate::flow) fn at_stop(&mut self, offset: usize) -> bool {
        let at = self.stop_at == Some(offset);
        self.stopped |= at;
        at
    }

    /// A TSC packet: the time of what follows. It is reported (as a clock
    /// tick) only with the next event, as LLDB does: libipt stamps each
    /// event with the time at its packet, and LLDB turns a changed stamp
    /// into a tick item just before the event.
    pub(in crate::flow) fn tick(&mut self, tsc: u64) {
        self.time = Some(tsc);
    }

    /// Reports the current time if it changed since the last report (before
    /// an event, an overflow, a sync point; tracing enabled, CBR and MODE
    /// are libipt events too, though not items).
    pub(in crate::flow) fn notify_time(&mut self, log: &mut impl EventLog) {
        self.notify_time_at(log, self.time);
    }

    /// Reports `time`, the time at an event's packet (read before reading
    /// ahead past it), if it changed since the last report.
    pub(in crate::flow) fn notify_time_at(&mut self, log: &mut impl EventLog, time: Option<u64>) {
        if time.is_none() && self.slice_time_unknown {
            // LLDB's slice decoder has not met a TSC yet: the event has none.
            return;
        }
        if time.is_none() && self.time.is_none() {
            // No TSC read yet: when this is a later part of a trace, the
            // time read before it belongs here (see `History::append`).
            log.event_before_any_time();
        }
        if time != self.notified {
            if let Some(tsc) = time {
                log.event(Event::ClockTick(tsc));
            }
            self.notified = time;
        }
    }

    /// LLDB's TSC of a slice whose PSB+ has none: the time of the first
    /// event that libipt's query decoder, synchronised afresh at the PSB
    /// (knowing no time), gives with a TSC — the TSC met before an event
    /// packet, while the packets on the way are events or status (a TNT, or
    /// a TIP no FUP waits for, ends the search).
    pub(in crate::flow) fn slice_tsc_ahead(&self) -> Option<u64> {
        let mut ahead = self.packets.clone();
        let (mut tsc, mut fup_waits) = (None, false);
        while let Ok(Some((_, packet))) = next_packet(&mut ahead) {
            match packet {
                Packet::Tsc(value) => tsc = Some(value),
                Packet::Mtc(_) | Packet::Cyc(_) | Packet::Tma { .. } | Packet::Pad | Packet::Psb | Packet::Psbend => {}
                Packet::Fup(_) => fup_waits = true,
                Packet::TntShort(_) | Packet::TntLong(_) => return None,
                Packet::Tip(_) if !fup_waits => return None,
                _ if tsc.is_some() => return tsc,
                _ => fup_waits = false,
            }
        }
        None
    }

    /// The FUP IP of the PSB+ that starts at the packet decoder's position
    /// (the PSB itself already read), without consuming anything.
    pub(in crate::flow) fn psb_fup_lookahead(&self) -> Option<u64> {
        Self::header_fup(self.packets.clone())
    }

    /// The FUP IP of the PSB+ header `ahead` is in (after its PSB).
    pub(in crate::flow) fn header_fup(mut ahead: PacketDecoder<'a>) -> Option<u64> {
        let mut ip = None;
        while let Ok(Some((_, packet))) = next_packet(&mut ahead) {
            match packet {
                Packet::Psbend => break,
                Packet::Fup(fup) => ip = fup.ip,
                _ => {}
            }
        }
        ip
    }
}
