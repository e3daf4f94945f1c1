//! gdbstub's capabilities, offered alike by every inferior: the same
//! packets reach the same gdbstub parsers whatever is debugged. (The crate
//! root offers them for each target: the protocol names none.)

/// The gdbstub capabilities every target offers — the same for all, so
/// that a packet reaches the same gdbstub parser whatever is debugged (the
/// protocol side's checks, and its fuzzing against the inert target, hold
/// for the live one): multi-thread base with resume, single step and
/// scheduler locking, software and hardware breakpoints and watchpoints,
/// the executable's path, auxv, the library list, extended mode (only so
/// that thread ids carry the real pid); no fork events.
macro_rules! offer_capabilities {
    ($target:ty) => {
        impl gdbstub::target::Target for $target {
            type Arch = crate::arch::X86_64Linux;
            type Error = crate::inferior::InferiorError;

            fn base_ops(&mut self) -> gdbstub::target::ext::base::BaseOps<'_, Self::Arch, Self::Error> {
                gdbstub::target::ext::base::BaseOps::MultiThread(self)
            }

            fn support_breakpoints(&mut self) -> Option<gdbstub::target::ext::breakpoints::BreakpointsOps<'_, Self>> {
                Some(self)
            }

            fn support_exec_file(&mut self) -> Option<gdbstub::target::ext::exec_file::ExecFileOps<'_, Self>> {
                Some(self)
            }

            fn support_auxv(&mut self) -> Option<gdbstub::target::ext::auxv::AuxvOps<'_, Self>> {
                Some(self)
            }

            fn support_libraries_svr4(&mut self) -> Option<gdbstub::target::ext::libraries::LibrariesSvr4Ops<'_, Self>> {
                Some(self)
            }

            fn support_monitor_cmd(&mut self) -> Option<gdbstub::target::ext::monitor_cmd::MonitorCmdOps<'_, Self>> {
                Some(self)
            }

            fn support_extended_mode(&mut self) -> Option<gdbstub::target::ext::extended_mode::ExtendedModeOps<'_, Self>> {
                Some(self)
            }

            fn support_host_io(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoOps<'_, Self>> {
                Some(self)
            }

            fn use_fork_stop_reason(&self) -> bool {
                false
            }

            fn use_vfork_stop_reason(&self) -> bool {
                false
            }

            fn use_vforkdone_stop_reason(&self) -> bool {
                false
            }
        }

        impl gdbstub::target::ext::monitor_cmd::MonitorCmd for $target {
            fn handle_monitor_cmd(
                &mut self,
                cmd: &[u8],
                mut out: gdbstub::target::ext::monitor_cmd::ConsoleOutput<'_>,
            ) -> Result<(), Self::Error> {
                let command = String::from_utf8_lossy(cmd);
                match crate::protocol::monitor::answer(self, &command) {
                    // In `O` packets of a few KiB each (a trace's hex can be megabytes).
                    Ok(text) => {
                        for chunk in text.as_bytes().chunks(2048) {
                            out.write_raw(chunk);
                            out.flush();
                        }
                    }
                    Err(reason) => {
                        out.write_raw(b"error: ");
                        out.write_raw(reason.as_bytes());
                        out.write_raw(b"\n");
                    }
                }
                Ok(())
            }
        }

        impl gdbstub::target::ext::host_io::HostIo for $target {
            fn support_open(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoOpenOps<'_, Self>> {
                Some(self)
            }

            fn support_close(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoCloseOps<'_, Self>> {
                Some(self)
            }

            fn support_pread(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoPreadOps<'_, Self>> {
                Some(self)
            }

            fn support_fstat(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoFstatOps<'_, Self>> {
                Some(self)
            }

            fn support_readlink(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoReadlinkOps<'_, Self>> {
                Some(self)
            }

            fn support_setfs(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoSetfsOps<'_, Self>> {
                Some(self)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoOpen for $target {
            fn open(
                &mut self,
                filename: &[u8],
                flags: gdbstub::target::ext::host_io::HostIoOpenFlags,
                _mode: gdbstub::target::ext::host_io::HostIoOpenMode,
            ) -> gdbstub::target::ext::host_io::HostIoResult<u32, Self> {
                let target = crate::inferior::Inferior::target_file(self, filename);
                crate::inferior::host_files::open_for(filename, flags, target)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoClose for $target {
            fn close(&mut self, fd: u32) -> gdbstub::target::ext::host_io::HostIoResult<(), Self> {
                crate::inferior::host_files::close(fd)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoPread for $target {
            fn pread(&mut self, fd: u32, count: usize, offset: u64, buf: &mut [u8]) -> gdbstub::target::ext::host_io::HostIoResult<usize, Self> {
                crate::inferior::host_files::pread(fd, count, offset, buf)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoFstat for $target {
            fn fstat(&mut self, fd: u32) -> gdbstub::target::ext::host_io::HostIoResult<gdbstub::target::ext::host_io::HostIoStat, Self> {
                crate::inferior::host_files::fstat(fd)
            }
        }

        impl gdbstub::target::ext::host_io::HostIoReadlink for $target {
            fn readlink(&mut self, filename: &[u8], buf: &mut [u8]) -> gdbstub::target::ext::host_io::HostIoResult<usize, Self> {
                crate::inferior::host_files::readlink(filename, buf)
            }
        }

        /// One filesystem: the stub's (it and the program share it).
        impl gdbstub::target::ext::host_io::HostIoSetfs for $target {
            fn setfs(&mut self, _fs: gdbstub::target::ext::host_io::FsKind) -> gdbstub::target::ext::host_io::HostIoResult<(), Self> {
                Ok(())
            }
        }

        impl gdbstub::target::ext::breakpoints::Breakpoints for $target {
            fn support_sw_breakpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::SwBreakpointOps<'_, Self>> {
                Some(self)
            }

            fn support_hw_breakpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::HwBreakpointOps<'_, Self>> {
                Some(self)
            }

            fn support_hw_watchpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::HwWatchpointOps<'_, Self>> {
                Some(self)
            }
        }
    };
}
pub(crate) use offer_capabilities;
