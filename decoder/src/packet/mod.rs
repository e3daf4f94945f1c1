//! Intel PT packets: types, decoder, encoder, synchronisation and listing.
//!
//! Implements the packet layer of the Intel SDM, Vol. 3C, chapter "Intel
//! Processor Trace", section "Trace Packets and Data Types" (every packet of the
//! current edition, including Event Trace and PEBS-via-PT packets), and the
//! "FUP/TIP IP Reconstruction" rules for IP compression.
//!
//! * [`PacketDecoder`] — zero-copy decoding of a `&[u8]` into `(offset, Packet)`.
//! * [`PacketEncoder`] — byte-exact encoding, choosing IP compression as hardware does.
//! * [`sync`] — finding PSB packets forwards and backwards.
//! * [`listing`] — a `ptdump`-style text line and a JSON record per packet.

mod decode;
mod encode;
pub mod listing;
pub mod script;
pub mod sync;

pub use decode::{PacketDecoder, PacketError, PacketErrorKind};
pub use encode::{choose_compression, EncodeError, IpPacketKind, PacketEncoder};

use serde::Serialize;

/// Length in bytes of a PSB packet (`02 82` repeated eight times).
pub const PSB_LEN: usize = 16;

/// The byte pattern of a PSB packet.
pub const PSB_BYTES: [u8; PSB_LEN] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

/// How an IP packet (TIP, TIP.PGE, TIP.PGD, FUP) compresses its target address
/// against the decoder's last IP (the `IPBytes` field, bits 7:5 of byte 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IpCompression {
    /// `000`: no payload; the IP is suppressed (out of context or not applicable).
    Suppressed = 0,
    /// `001`: 2 payload bytes replace IP[15:0] of the last IP.
    Update16 = 1,
    /// `010`: 4 payload bytes replace IP[31:0] of the last IP.
    Update32 = 2,
    /// `011`: 6 payload bytes, sign-extended from bit 47.
    Sext48 = 3,
    /// `100`: 6 payload bytes replace IP[47:0] of the last IP.
    Update48 = 4,
    /// `110`: 8 payload bytes, the full IP.
    Full = 6,
}

impl IpCompression {
    /// Decodes an `IPBytes` field; `5` and `7` are reserved.
    pub fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            0 => Self::Suppressed,
            1 => Self::Update16,
            2 => Self::Update32,
            3 => Self::Sext48,
            4 => Self::Update48,
            6 => Self::Full,
            _ => return None,
        })
    }

    /// Number of payload bytes that follow the opcode byte.
    pub fn payload_len(self) -> usize {
        match self {
            Self::Suppressed => 0,
            Self::Update16 => 2,
            Self::Update32 => 4,
            Self::Sext48 | Self::Update48 => 6,
            Self::Full => 8,
        }
    }

    /// Every compression form, shortest payload first.
    pub const ALL: [IpCompression; 6] = [
        Self::Suppressed,
        Self::Update16,
        Self::Update32,
        Self::Sext48,
        Self::Update48,
        Self::Full,
    ];

    /// Applies this compression to `raw` (the payload as read, little-endian,
    /// zero-extended) against `last_ip`. Returns `None` when suppressed.
    pub fn reconstruct(self, raw: u64, last_ip: u64) -> Option<u64> {
        Some(match self {
            Self::Suppressed => return None,
            Self::Update16 => (last_ip & !0xffff) | (raw & 0xffff),
            Self::Update32 => (last_ip & !0xffff_ffff) | (raw & 0xffff_ffff),
            Self::Sext48 => sign_extend_48(raw),
            Self::Update48 => (last_ip & !0xffff_ffff_ffff) | (raw & 0xffff_ffff_ffff),
            Self::Full => raw,
        })
    }
}

/// Sign-extends a 48-bit value to 64 bits.
pub fn sign_extend_48(value: u64) -> u64 {
    (((value << 16) as i64) >> 16) as u64
}

/// The IP payload of a TIP, TIP.PGE, TIP.PGD or FUP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Ip {
    /// The compression form (`IPBytes`).
    pub compression: IpCompression,
    /// The payload bytes as stored in the packet, little-endian, zero-extended.
    pub raw: u64,
    /// The reconstructed IP (payload applied to the last IP), or `None` when
    /// suppressed. Filled in by [`PacketDecoder`]; ignored by the encoder.
    pub ip: Option<u64>,
}

impl Ip {
    /// An IP payload with an explicit compression form and raw payload; `ip` is
    /// left unresolved (the decoder resolves it against its last IP).
    pub fn new(compression: IpCompression, raw: u64) -> Self {
        let mask = match compression.payload_len() {
            8 => u64::MAX,
            n => (1u64 << (8 * n)) - 1,
        };
        Ip { compression, raw: raw & mask, ip: None }
    }

    /// A suppressed IP.
    pub fn suppressed() -> Self {
        Ip { compression: IpCompression::Suppressed, raw: 0, ip: None }
    }
}

/// Taken/not-taken bits of a TNT packet.
///
/// `bits` holds `len` outcome bits; bit `len - 1` is the **oldest** branch (as
/// in the packet, and as libipt's `pt_packet_tnt.payload`). `1` = taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Tnt {
    /// The outcome bits, oldest in the most significant position.
    pub bits: u64,
    /// How many outcome bits (1–6 for a short TNT, 1–47 for a long TNT).
    pub len: u8,
}

impl Tnt {
    /// Outcomes from oldest to newest.
    pub fn outcomes(self) -> impl Iterator<Item = bool> {
        (0..self.len).rev().map(move |i| self.bits >> i & 1 == 1)
    }

    /// Builds a TNT payload from outcomes, oldest first.
    pub fn from_outcomes(outcomes: impl IntoIterator<Item = bool>) -> Self {
        let mut tnt = Tnt { bits: 0, len: 0 };
        for taken in outcomes {
            tnt.bits = tnt.bits << 1 | taken as u64;
            tnt.len += 1;
        }
        tnt
    }
}

/// Payload size of BIP packets within a PEBS-via-PT block (BBP `SZ` bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockItemSize {
    /// `SZ = 0`: 8-byte BIP payloads.
    Eight,
    /// `SZ = 1`: 4-byte BIP payloads.
    Four,
}

impl BlockItemSize {
    /// Payload bytes of one BIP packet.
    pub fn payload_len(self) -> usize {
        match self {
            Self::Eight => 8,
            Self::Four => 4,
        }
    }
}

/// One Intel PT packet.
///
/// Field names follow the SDM; every value is decoded from the packet alone
/// except [`Ip::ip`], which needs the last-IP state the decoder tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "packet", content = "payload")]
pub enum Packet {
    /// `00`: padding.
    #[serde(rename = "pad")]
    Pad,
    /// `02 82` × 8: packet stream boundary; opens PSB+ and resets the last IP.
    #[serde(rename = "psb")]
    Psb,
    /// `02 23`: end of PSB+.
    #[serde(rename = "psbend")]
    Psbend,
    /// Short TNT (one even byte): up to 6 conditional-branch outcomes.
    #[serde(rename = "tnt.8")]
    TntShort(Tnt),
    /// Long TNT (`02 A3` + 6 bytes): up to 47 outcomes.
    #[serde(rename = "tnt.64")]
    TntLong(Tnt),
    /// Target IP of an indirect branch, far transfer or uncompressed return.
    #[serde(rename = "tip")]
    Tip(Ip),
    /// Packet generation enabled at this IP.
    #[serde(rename = "tip.pge")]
    TipPge(Ip),
    /// Packet generation disabled; the IP may be suppressed.
    #[serde(rename = "tip.pgd")]
    TipPgd(Ip),
    /// Flow update: source IP of an asynchronous event, or the current IP in PSB+.
    #[serde(rename = "fup")]
    Fup(Ip),
    /// Paging information (`02 43`): CR3 and VMX non-root flag.
    #[serde(rename = "pip")]
    Pip {
        /// CR3 value (bits 51:5; low bits zero).
        cr3: u64,
        /// Non-root (guest) bit.
        nr: bool,
    },
    /// MODE.Exec: execution mode after the next far transfer.
    #[serde(rename = "mode.exec")]
    ModeExec {
        /// CS.L (64-bit code).
        csl: bool,
        /// CS.D (32-bit default operand size).
        csd: bool,
        /// RFLAGS.IF (Event Trace only; zero otherwise).
        iflag: bool,
    },
    /// MODE.TSX: transactional state.
    #[serde(rename = "mode.tsx")]
    ModeTsx {
        /// Inside a transaction.
        intx: bool,
        /// Transaction aborted.
        abort: bool,
    },
    /// Time-stamp counter bits 55:0.
    #[serde(rename = "tsc")]
    Tsc(u64),
    /// Mini time counter: CTC bits N+7:N.
    #[serde(rename = "mtc")]
    Mtc(u8),
    /// TSC/MTC alignment.
    #[serde(rename = "tma")]
    Tma {
        /// CTC bits 15:0 at the time of the last TSC.
        ctc: u16,
        /// Fast counter (9 bits).
        fc: u16,
    },
    /// Cycle count since the last CYC-eligible packet.
    #[serde(rename = "cyc")]
    Cyc(u64),
    /// Core:bus ratio.
    #[serde(rename = "cbr")]
    Cbr(u8),
    /// VMCS pointer (physical address, bits 51:12).
    #[serde(rename = "vmcs")]
    Vmcs(u64),
    /// Internal buffer overflow: packets were lost.
    #[serde(rename = "ovf")]
    Ovf,
    /// ToPA STOP region reached; tracing stopped.
    #[serde(rename = "stop")]
    Stop,
    /// Maintenance packet (`02 C3 88` + 8 bytes); carries nothing a decoder uses.
    #[serde(rename = "mnt")]
    Mnt(u64),
    /// PTWRITE payload.
    #[serde(rename = "ptw")]
    Ptw {
        /// The value written (4 or 8 bytes).
        payload: u64,
        /// Payload bytes (4 or 8).
        size: u8,
        /// A FUP with the PTWRITE's IP follows.
        ip: bool,
    },
    /// Execution stopped (power event).
    #[serde(rename = "exstop")]
    Exstop {
        /// A FUP with the IP follows.
        ip: bool,
    },
    /// MWAIT hints and extensions.
    #[serde(rename = "mwait")]
    Mwait {
        /// EAX of the MWAIT.
        hints: u32,
        /// ECX of the MWAIT.
        ext: u32,
    },
    /// Power entry: resolved thread C-state.
    #[serde(rename = "pwre")]
    Pwre {
        /// Resolved thread C-state (4 bits).
        state: u8,
        /// Resolved thread sub C-state (4 bits).
        sub_state: u8,
        /// Entry initiated by hardware.
        hw: bool,
    },
    /// Power exit.
    #[serde(rename = "pwrx")]
    Pwrx {
        /// Last core C-state.
        last: u8,
        /// Deepest core C-state.
        deepest: u8,
        /// Wake reason bits (bit 0 interrupt, bit 2 store to monitored address,
        /// bit 3 hardware autonomous).
        wake: u8,
    },
    /// Block begin (PEBS via PT): the following BIP packets belong to a block.
    #[serde(rename = "bbp")]
    Bbp {
        /// Payload size of the block's BIP packets.
        size: BlockItemSize,
        /// Block type (5 bits).
        kind: u8,
    },
    /// Block item (only inside a BBP … BEP block).
    #[serde(rename = "bip")]
    Bip {
        /// Item id (5 bits).
        id: u8,
        /// Item payload (4 or 8 bytes, per the block's BBP).
        payload: u64,
        /// Payload bytes (4 or 8).
        size: u8,
    },
    /// Block end.
    #[serde(rename = "bep")]
    Bep {
        /// A FUP with the IP follows.
        ip: bool,
    },
    /// Control-flow event (Event Trace).
    #[serde(rename = "cfe")]
    Cfe {
        /// Binds to the following FUP.
        ip: bool,
        /// Event type (5 bits).
        kind: u8,
        /// Vector (interrupts, exceptions).
        vector: u8,
    },
    /// Event data (Event Trace); precedes its CFE.
    #[serde(rename = "evd")]
    Evd {
        /// Data type (6 bits).
        kind: u8,
        /// The data (CR2, VMX exit qualification, …).
        payload: u64,
    },
    /// Trigger.
    #[serde(rename = "trig")]
    Trig {
        /// Trigger-request bit vector.
        trbv: u8,
        /// A FUP with the IP follows.
        ip: bool,
        /// More than one trigger occurred.
        mult: bool,
        /// Instruction count, when valid (ICNTV).
        icnt: Option<u16>,
    },
}

impl Packet {
    /// The packet's short name, as libipt's ptdump prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Pad => "pad",
            Packet::Psb => "psb",
            Packet::Psbend => "psbend",
            Packet::TntShort(_) => "tnt.8",
            Packet::TntLong(_) => "tnt.64",
            Packet::Tip(_) => "tip",
            Packet::TipPge(_) => "tip.pge",
            Packet::TipPgd(_) => "tip.pgd",
            Packet::Fup(_) => "fup",
            Packet::Pip { .. } => "pip",
            Packet::ModeExec { .. } => "mode.exec",
            Packet::ModeTsx { .. } => "mode.tsx",
            Packet::Tsc(_) => "tsc",
            Packet::Mtc(_) => "mtc",
            Packet::Tma { .. } => "tma",
            Packet::Cyc(_) => "cyc",
            Packet::Cbr(_) => "cbr",
            Packet::Vmcs(_) => "vmcs",
            Packet::Ovf => "ovf",
            Packet::Stop => "stop",
            Packet::Mnt(_) => "mnt",
            Packet::Ptw { .. } => "ptw",
            Packet::Exstop { .. } => "exstop",
            Packet::Mwait { .. } => "mwait",
            Packet::Pwre { .. } => "pwre",
            Packet::Pwrx { .. } => "pwrx",
            Packet::Bbp { .. } => "bbp",
            Packet::Bip { .. } => "bip",
            Packet::Bep { .. } => "bep",
            Packet::Cfe { .. } => "cfe",
            Packet::Evd { .. } => "evd",
            Packet::Trig { .. } => "trig",
        }
    }

    /// The IP payload, for TIP, TIP.PGE, TIP.PGD and FUP.
    pub fn ip(&self) -> Option<&Ip> {
        match self {
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => Some(ip),
            _ => None,
        }
    }

    /// True for packets that may appear inside a PEBS BBP … BEP block without
    /// ending it (timing, power and padding packets, FUP, and BIP itself);
    /// any other packet ends the block context.
    pub fn keeps_block_context(&self) -> bool {
        matches!(
            self,
            Packet::Pad
                | Packet::Bip { .. }
                | Packet::Tsc(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Cbr(_)
                | Packet::Mnt(_)
                | Packet::Exstop { .. }
                | Packet::Pwre { .. }
                | Packet::Pwrx { .. }
                | Packet::Fup(_)
        )
    }

    /// True for packets newer than libipt 2.0.5 (Event Trace, PEBS via PT, TRIG).
    pub fn is_post_libipt_2_0(&self) -> bool {
        matches!(
            self,
            Packet::Bbp { .. }
                | Packet::Bip { .. }
                | Packet::Bep { .. }
                | Packet::Cfe { .. }
                | Packet::Evd { .. }
                | Packet::Trig { .. }
        )
    }
}
