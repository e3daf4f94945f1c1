//! The TSC → perf-clock (nanoseconds) conversion the kernel publishes in a
//! perf event's metadata page (`time_mult`, `time_shift`, `time_zero`), which
//! LLDB uses as `tscPerfZeroConversion` to show instruction times. Obtained as
//! lldb-server does: a software dummy event on ourselves, one mapped page.

use perf_event_open_sys as sys;

/// perf's TSC conversion parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscConversion {
    /// `time_mult`.
    pub time_mult: u32,
    /// `time_shift`.
    pub time_shift: u16,
    /// `time_zero`.
    pub time_zero: u64,
}

impl TscConversion {
    /// Nanoseconds of the perf clock at `tsc` (LLDB's `ToNanos`).
    pub fn to_nanos(&self, tsc: u64) -> u64 {
        let mult = self.time_mult as u64;
        let shift = self.time_shift as u32;
        let low = tsc & ((1u64 << shift) - 1);
        self.time_zero.wrapping_add((tsc >> shift).wrapping_mul(mult)).wrapping_add((low * mult) >> shift)
    }
}

/// Reads the conversion, or `None` if the kernel does not publish it
/// (`cap_user_time_zero` clear) or perf events are unavailable.
pub fn tsc_conversion() -> Option<TscConversion> {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        config: sys::bindings::PERF_COUNT_SW_DUMMY as u64,
        ..Default::default()
    };
    attr.set_exclude_kernel(1);
    // SAFETY: a valid attr; pid 0 = this process, any CPU.
    let fd = unsafe { sys::perf_event_open(&mut attr, 0, -1, -1, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: mapping the metadata page of our own event, then reading it.
    let result = unsafe {
        let page = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, fd, 0);
        let result = if page == libc::MAP_FAILED {
            None
        } else {
            let meta = &*(page as *const sys::bindings::perf_event_mmap_page);
            let caps = meta.__bindgen_anon_1.__bindgen_anon_1;
            let conversion = (caps.cap_user_time() == 1 && caps.cap_user_time_zero() == 1).then(|| TscConversion {
                time_mult: meta.time_mult,
                time_shift: meta.time_shift,
                time_zero: meta.time_zero,
            });
            libc::munmap(page, 4096);
            conversion
        };
        libc::close(fd);
        result
    };
    result
}

/// The clock behind the trace's TSC packets: the real TSC when the kernel
/// publishes its conversion to nanoseconds, else CLOCK_MONOTONIC nanoseconds
/// with an identity conversion (as a stub without a usable TSC may do).
#[derive(Debug, Clone, Copy)]
pub enum TraceClock {
    /// The processor's time-stamp counter.
    Tsc(TscConversion),
    /// CLOCK_MONOTONIC nanoseconds.
    MonotonicNanos,
}

impl TraceClock {
    /// The TSC when the kernel publishes its conversion, else the monotonic clock.
    pub fn choose() -> Self {
        match tsc_conversion() {
            Some(conversion) => TraceClock::Tsc(conversion),
            None => TraceClock::MonotonicNanos,
        }
    }

    /// The time now, in this clock's units.
    pub fn now(&self) -> u64 {
        match self {
            // SAFETY: RDTSC has no preconditions on x86-64.
            TraceClock::Tsc(_) => unsafe { core::arch::x86_64::_rdtsc() },
            TraceClock::MonotonicNanos => nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
                .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
                .unwrap_or(0),
        }
    }

    /// How this clock's values convert to perf-clock nanoseconds.
    pub fn conversion(&self) -> TscConversion {
        match self {
            TraceClock::Tsc(conversion) => *conversion,
            TraceClock::MonotonicNanos => TscConversion { time_mult: 1, time_shift: 0, time_zero: 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lldb_formula() {
        // The conversion an Intel machine's perf event page gave (LLDB's
        // `tscPerfZeroConversion` of a real trace).
        let c = TscConversion { time_mult: 1076264588, time_shift: 31, time_zero: 0 };
        let one_second_of_ticks = (1u64 << 31) * 1_000_000_000 / 1076264588;
        let ns = c.to_nanos(one_second_of_ticks);
        assert!((999_999_000..=1_000_001_000).contains(&ns), "{ns}");
    }

    #[test]
    fn conversion_tracks_the_monotonic_clock() {
        let Some(c) = tsc_conversion() else {
            eprintln!("the kernel publishes no TSC conversion here");
            return;
        };
        // SAFETY: RDTSC has no preconditions.
        let t0 = unsafe { core::arch::x86_64::_rdtsc() };
        let start = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let t1 = unsafe { core::arch::x86_64::_rdtsc() };
        let elapsed = start.elapsed().as_nanos() as f64;
        let converted = (c.to_nanos(t1) - c.to_nanos(t0)) as f64;
        assert!((converted / elapsed - 1.0).abs() < 0.05, "converted {converted} ns, measured {elapsed} ns");
    }
}
