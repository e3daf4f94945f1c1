//! Generated Intel PT packet streams covering every packet kind and every IP
//! compression form, built with retrace's encoder from random packet values.
//!
//! Streams are sequences of PSB-delimited segments (PSB+ header, then random
//! packets), so a decoder can synchronise anywhere. Packets that libipt 2.0.5
//! does not know (BBP/BIP/BEP, CFE, EVD, TRIG) are placed only at the end of
//! a segment, where a libipt-based decoder loses nothing by resynchronising.

use std::collections::BTreeMap;

use retrace_decoder::packet::{BlockItemSize, Ip, IpCompression, IpPacketKind, Packet, PacketEncoder, Tnt};

use crate::rng::Rng;

/// What mix of packets to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Every packet kind about equally often: for differential testing.
    Uniform,
    /// Shaped like user-space traces: mostly TNT, then TIP/FUP and timing.
    Realistic,
}

/// Options for [`generate`].
#[derive(Debug, Clone, Copy)]
pub struct StreamOptions {
    /// Seed of the random generator.
    pub seed: u64,
    /// Stop after at least this many packets.
    pub packets: u64,
    /// The packet mix.
    pub profile: Profile,
    /// Also emit packets newer than libipt 2.0.5 at segment ends.
    pub post_libipt_packets: bool,
}

/// A generated stream.
#[derive(Debug, Clone, Default)]
pub struct GeneratedStream {
    /// The encoded bytes.
    pub bytes: Vec<u8>,
    /// Packets encoded.
    pub packets: u64,
    /// How many packets of each kind (by ptdump name).
    pub kinds: BTreeMap<&'static str, u64>,
    /// How many IP packets of each compression form (by IPBytes value).
    pub ip_forms: BTreeMap<u8, u64>,
}

struct Generator {
    rng: Rng,
    encoder: PacketEncoder,
    out: GeneratedStream,
}

impl Generator {
    fn emit(&mut self, packet: Packet) {
        self.encoder.encode(&packet).unwrap_or_else(|e| panic!("generator built an invalid packet {packet:?}: {e}"));
        self.count(&packet);
    }

    fn count(&mut self, packet: &Packet) {
        self.out.packets += 1;
        *self.out.kinds.entry(packet.name()).or_default() += 1;
        if let Some(ip) = packet.ip() {
            *self.out.ip_forms.entry(ip.compression as u8).or_default() += 1;
        }
    }

    fn random_ip(&mut self) -> Ip {
        let forms = IpCompression::ALL;
        let compression = forms[self.rng.below(forms.len() as u64) as usize];
        let raw = self.rng.bits(8 * compression.payload_len() as u32);
        Ip::new(compression, raw)
    }

    fn ip_packet(&mut self, kind: IpPacketKind) {
        if self.rng.coin() {
            // an address in a user-space code region, compressed as hardware does
            let base = [0x40_0000u64, 0x5555_5555_4000, 0x7fff_f7dd_0000, 0xffff_ffff_8100_0000];
            let ip = base[self.rng.below(4) as usize] + self.rng.bits(20);
            let compression = self.encoder.encode_ip(kind, Some(ip));
            let ip = Ip::new(compression, ip);
            self.count(&make_ip(kind, ip));
        } else {
            let ip = self.random_ip();
            self.emit(make_ip(kind, ip));
        }
    }

    fn tnt(&mut self, long: bool) -> Packet {
        let len = if long { self.rng.range(1, 47) } else { self.rng.range(1, 6) } as u8;
        let tnt = Tnt { bits: self.rng.bits(len as u32), len };
        if long {
            Packet::TntLong(tnt)
        } else {
            Packet::TntShort(tnt)
        }
    }

    fn cyc(&mut self) -> Packet {
        let bits = [5u32, 12, 19, 26, 40, 61][self.rng.below(6) as usize];
        Packet::Cyc(self.rng.bits(bits))
    }

    fn psb_plus(&mut self) {
        self.emit(Packet::Psb);
        if self.rng.coin() {
            let tsc = self.rng.bits(56);
            self.emit(Packet::Tsc(tsc));
            if self.rng.coin() {
                let (ctc, fc) = (self.rng.bits(16) as u16, self.rng.bits(9) as u16);
                self.emit(Packet::Tma { ctc, fc });
            }
        }
        if self.rng.one_in(3) {
            let ratio = self.rng.bits(8) as u8;
            self.emit(Packet::Cbr(ratio));
        }
        if self.rng.one_in(3) {
            let (cr3, nr) = (self.rng.bits(47) << 5, self.rng.coin());
            self.emit(Packet::Pip { cr3, nr });
        }
        if self.rng.one_in(8) {
            let base = self.rng.bits(40) << 12;
            self.emit(Packet::Vmcs(base));
        }
        self.emit(Packet::ModeExec { csl: true, csd: false, iflag: false });
        if self.rng.coin() {
            self.ip_packet(IpPacketKind::Fup);
        }
        self.emit(Packet::Psbend);
    }

    fn uniform_packet(&mut self) {
        let rng = &mut self.rng;
        let packet = match rng.below(30) {
            0 => Packet::Pad,
            1 | 2 => self.tnt(false),
            3 => self.tnt(true),
            4 => return self.ip_packet(IpPacketKind::Tip),
            5 => return self.ip_packet(IpPacketKind::TipPge),
            6 => return self.ip_packet(IpPacketKind::TipPgd),
            7 => return self.ip_packet(IpPacketKind::Fup),
            8 => Packet::Pip { cr3: rng.bits(47) << 5, nr: rng.coin() },
            9 => Packet::ModeExec { csl: rng.coin(), csd: rng.coin(), iflag: false },
            10 => Packet::ModeTsx { intx: rng.coin(), abort: rng.coin() },
            11 => Packet::Tsc(rng.bits(56)),
            12 => Packet::Mtc(rng.bits(8) as u8),
            13 => Packet::Tma { ctc: rng.bits(16) as u16, fc: rng.bits(9) as u16 },
            14 | 15 => self.cyc(),
            16 => Packet::Cbr(rng.bits(8) as u8),
            17 => Packet::Vmcs(rng.bits(40) << 12),
            18 => Packet::Ovf,
            19 => Packet::Stop,
            20 => Packet::Mnt(rng.next_u64()),
            21 => {
                let size = if rng.coin() { 8 } else { 4 };
                Packet::Ptw { payload: rng.bits(8 * size), size: size as u8, ip: rng.coin() }
            }
            22 => Packet::Exstop { ip: rng.coin() },
            23 => Packet::Mwait { hints: rng.bits(32) as u32, ext: rng.bits(32) as u32 },
            24 => Packet::Pwre { state: rng.bits(4) as u8, sub_state: rng.bits(4) as u8, hw: rng.coin() },
            25 => {
                let wake = [1u8, 4, 8][rng.below(3) as usize];
                Packet::Pwrx { last: rng.bits(4) as u8, deepest: rng.bits(4) as u8, wake }
            }
            26 => Packet::Psbend,
            _ => self.tnt(false),
        };
        self.emit(packet);
    }

    fn realistic_packet(&mut self) {
        let packet = match self.rng.below(100) {
            0..=59 => self.tnt(false),
            60..=64 => self.tnt(true),
            65..=79 => return self.ip_packet(IpPacketKind::Tip),
            80..=83 => return self.ip_packet(IpPacketKind::Fup),
            84..=86 => return self.ip_packet(IpPacketKind::TipPge),
            87..=89 => return self.ip_packet(IpPacketKind::TipPgd),
            90..=93 => self.cyc(),
            94..=95 => Packet::Mtc(self.rng.bits(8) as u8),
            96 => Packet::Tsc(self.rng.bits(56)),
            97 => Packet::ModeExec { csl: true, csd: false, iflag: false },
            98 => Packet::Pad,
            _ => Packet::Cbr(self.rng.bits(8) as u8),
        };
        self.emit(packet);
    }

    /// One packet group newer than libipt 2.0.5.
    fn post_libipt_group(&mut self) {
        match self.rng.below(4) {
            0 => {
                let size = if self.rng.coin() { BlockItemSize::Four } else { BlockItemSize::Eight };
                let kind = self.rng.bits(5) as u8;
                self.emit(Packet::Bbp { size, kind });
                for _ in 0..self.rng.range(1, 4) {
                    let bytes = size.payload_len();
                    let (id, payload) = (self.rng.bits(5) as u8, self.rng.bits(8 * bytes as u32));
                    self.emit(Packet::Bip { id, payload, size: bytes as u8 });
                }
                let ip = self.rng.coin();
                self.emit(Packet::Bep { ip });
            }
            1 => {
                let kind = self.rng.bits(6) as u8;
                let payload = self.rng.next_u64();
                self.emit(Packet::Evd { kind, payload });
                let (ip, kind, vector) = (self.rng.coin(), self.rng.bits(5) as u8, self.rng.bits(8) as u8);
                self.emit(Packet::Cfe { ip, kind, vector });
            }
            2 => {
                let (ip, kind, vector) = (self.rng.coin(), self.rng.bits(5) as u8, self.rng.bits(8) as u8);
                self.emit(Packet::Cfe { ip, kind, vector });
            }
            _ => {
                let icnt = self.rng.coin().then(|| self.rng.bits(16) as u16);
                let (trbv, ip, mult) = (self.rng.bits(8) as u8, self.rng.coin(), self.rng.coin());
                self.emit(Packet::Trig { trbv, ip, mult, icnt });
            }
        }
    }
}

fn make_ip(kind: IpPacketKind, ip: Ip) -> Packet {
    match kind {
        IpPacketKind::Tip => Packet::Tip(ip),
        IpPacketKind::TipPge => Packet::TipPge(ip),
        IpPacketKind::TipPgd => Packet::TipPgd(ip),
        IpPacketKind::Fup => Packet::Fup(ip),
    }
}

/// Generates a stream per `options`.
pub fn generate(options: StreamOptions) -> GeneratedStream {
    let mut generator = Generator {
        rng: Rng::new(options.seed),
        encoder: PacketEncoder::new(),
        out: GeneratedStream::default(),
    };
    while generator.out.packets < options.packets {
        generator.psb_plus();
        let body = match options.profile {
            Profile::Uniform => generator.rng.range(8, 120),
            Profile::Realistic => generator.rng.range(1000, 3000),
        };
        for _ in 0..body {
            match options.profile {
                Profile::Uniform => generator.uniform_packet(),
                Profile::Realistic => generator.realistic_packet(),
            }
        }
        if options.post_libipt_packets && generator.rng.one_in(4) {
            generator.post_libipt_group();
        }
    }
    generator.out.bytes = generator.encoder.into_bytes();
    generator.out
}
