//! Round trip: any sequence of valid packets, encoded and decoded again, gives
//! back the same packets at the offsets the encoder wrote them, with IPs
//! reconstructed per the SDM's "FUP/TIP IP Reconstruction" table.

use proptest::prelude::*;
use retrace_decoder::packet::{BlockItemSize, Ip, IpCompression, Packet, PacketDecoder, PacketEncoder, Tnt};

fn ip() -> impl Strategy<Value = Ip> {
    (prop::sample::select(IpCompression::ALL.to_vec()), any::<u64>()).prop_map(|(c, raw)| Ip::new(c, raw))
}

fn tnt(max: u8) -> impl Strategy<Value = Tnt> {
    (1..=max).prop_flat_map(|len| (Just(len), 0..(1u64 << len))).prop_map(|(len, bits)| Tnt { bits, len })
}

fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        Just(Packet::Pad),
        Just(Packet::Psb),
        Just(Packet::Psbend),
        Just(Packet::Ovf),
        Just(Packet::Stop),
        tnt(6).prop_map(Packet::TntShort),
        tnt(47).prop_map(Packet::TntLong),
        ip().prop_map(Packet::Tip),
        ip().prop_map(Packet::TipPge),
        ip().prop_map(Packet::TipPgd),
        ip().prop_map(Packet::Fup),
        (0u64..1 << 47, any::<bool>()).prop_map(|(c, nr)| Packet::Pip { cr3: c << 5, nr }),
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(csl, csd, iflag)| Packet::ModeExec { csl, csd, iflag }),
        (any::<bool>(), any::<bool>()).prop_map(|(intx, abort)| Packet::ModeTsx { intx, abort }),
        (0u64..1 << 56).prop_map(Packet::Tsc),
        any::<u8>().prop_map(Packet::Mtc),
        (any::<u16>(), 0u16..512).prop_map(|(ctc, fc)| Packet::Tma { ctc, fc }),
        prop_oneof![0u64..32, 0u64..1 << 12, 0u64..1 << 40, 0u64..1 << 61].prop_map(Packet::Cyc),
        any::<u8>().prop_map(Packet::Cbr),
        (0u64..1 << 40).prop_map(|b| Packet::Vmcs(b << 12)),
        any::<u64>().prop_map(Packet::Mnt),
        (any::<u32>(), any::<bool>()).prop_map(|(p, ip)| Packet::Ptw { payload: p as u64, size: 4, ip }),
        (any::<u64>(), any::<bool>()).prop_map(|(payload, ip)| Packet::Ptw { payload, size: 8, ip }),
        any::<bool>().prop_map(|ip| Packet::Exstop { ip }),
        (any::<u32>(), any::<u32>()).prop_map(|(hints, ext)| Packet::Mwait { hints, ext }),
        (0u8..16, 0u8..16, any::<bool>()).prop_map(|(state, sub_state, hw)| Packet::Pwre { state, sub_state, hw }),
        (0u8..16, 0u8..16, 0u8..16).prop_map(|(last, deepest, wake)| Packet::Pwrx { last, deepest, wake }),
        (any::<bool>(), 0u8..32).prop_map(|(four, kind)| Packet::Bbp {
            size: if four { BlockItemSize::Four } else { BlockItemSize::Eight },
            kind
        }),
        (0u8..32, any::<u64>(), any::<bool>()).prop_map(|(id, payload, four)| if four {
            Packet::Bip { id, payload: payload & 0xffff_ffff, size: 4 }
        } else {
            Packet::Bip { id, payload, size: 8 }
        }),
        any::<bool>().prop_map(|ip| Packet::Bep { ip }),
        (any::<bool>(), 0u8..32, any::<u8>()).prop_map(|(ip, kind, vector)| Packet::Cfe { ip, kind, vector }),
        (0u8..64, any::<u64>()).prop_map(|(kind, payload)| Packet::Evd { kind, payload }),
        (any::<u8>(), any::<bool>(), any::<bool>(), prop::option::of(any::<u16>()))
            .prop_map(|(trbv, ip, mult, icnt)| Packet::Trig { trbv, ip, mult, icnt }),
    ]
}

/// Makes a packet sequence valid: BIPs only inside a BBP block of their size,
/// and no short TNT inside a block that would read as a BIP.
fn well_formed(packets: Vec<Packet>) -> Vec<Packet> {
    let mut out = Vec::new();
    let mut block: Option<u8> = None;
    for packet in packets {
        match packet {
            Packet::Bip { size, .. } if block != Some(size) => {
                let size_kind = if size == 4 { BlockItemSize::Four } else { BlockItemSize::Eight };
                out.push(Packet::Bbp { size: size_kind, kind: 0 });
            }
            Packet::TntShort(t) if block.is_some() && ((1u8 << t.len | t.bits as u8) << 1) & 7 == 4 => {
                out.push(Packet::Bep { ip: false });
            }
            _ => {}
        }
        block = match packet {
            Packet::Bbp { size, .. } => Some(size.payload_len() as u8),
            Packet::Bip { size, .. } => Some(size),
            Packet::Pad
            | Packet::Tsc(_)
            | Packet::Tma { .. }
            | Packet::Mtc(_)
            | Packet::Cyc(_)
            | Packet::Cbr(_)
            | Packet::Mnt(_)
            | Packet::Fup(_)
            | Packet::Exstop { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. } => block,
            _ => None,
        };
        out.push(packet);
    }
    out
}

/// The SDM's IP reconstruction table, written out independently.
fn sdm_reconstruct(ipbytes: u8, payload: u64, last: u64) -> Option<u64> {
    match ipbytes {
        0 => None,
        1 => Some(last >> 16 << 16 | payload & 0xffff),
        2 => Some(last >> 32 << 32 | payload & 0xffff_ffff),
        3 => Some(if payload >> 47 & 1 == 1 { payload | 0xffff << 48 } else { payload }),
        4 => Some(last >> 48 << 48 | payload & 0xffff_ffff_ffff),
        6 => Some(payload),
        _ => unreachable!(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_then_decode_is_identity(packets in prop::collection::vec(packet(), 0..80)) {
        let packets = well_formed(packets);
        let mut encoder = PacketEncoder::new();
        let mut offsets = Vec::new();
        for packet in &packets {
            offsets.push(encoder.len());
            encoder.encode(packet).unwrap();
        }
        let bytes = encoder.into_bytes();
        let decoded: Vec<(usize, Packet)> = PacketDecoder::new(&bytes).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(decoded.len(), packets.len());

        let mut last_ip = 0u64;
        for ((offset, got), (want, want_offset)) in decoded.iter().zip(packets.iter().zip(&offsets)) {
            prop_assert_eq!(offset, want_offset);
            if matches!(want, Packet::Psb | Packet::Ovf) {
                // PSB resets IP compression; so does OVF (libipt resets its
                // query decoder there and hardware sends the next IP in full).
                last_ip = 0;
            }
            match (got.ip(), want.ip()) {
                (Some(got_ip), Some(want_ip)) => {
                    prop_assert_eq!(got_ip.compression, want_ip.compression);
                    prop_assert_eq!(got_ip.raw, want_ip.raw);
                    let expected = sdm_reconstruct(want_ip.compression as u8, want_ip.raw, last_ip);
                    prop_assert_eq!(got_ip.ip, expected);
                    if let Some(ip) = expected {
                        last_ip = ip;
                    }
                }
                _ => prop_assert_eq!(got, want),
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_errors_point_inside(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let mut decoder = PacketDecoder::new(&bytes);
        let mut last = None;
        for item in decoder.by_ref() {
            match item {
                Ok((offset, _)) => prop_assert!(offset < bytes.len()),
                Err(error) => prop_assert!(error.offset < bytes.len()),
            }
            let offset = item.map(|(o, _)| o).unwrap_or_else(|e| e.offset);
            if let Some(previous) = last {
                prop_assert!(offset > previous || item.is_err(), "no progress at {offset}");
            }
            last = Some(offset);
        }
    }
}

#[test]
fn sdm_encodings_of_newer_packets() {
    // Byte layouts from the SDM's packet definitions (Event Trace, PEBS via PT,
    // TRIG); libipt 2.0.5 cannot decode these, so they are checked here.
    let cases: &[(&[u8], Packet)] = &[
        (&[0x02, 0x13, 0x81, 0x0e], Packet::Cfe { ip: true, kind: 1, vector: 0x0e }),
        (&[0x02, 0x13, 0x0e, 0x00], Packet::Cfe { ip: false, kind: 0x0e, vector: 0 }),
        (
            &[0x02, 0x53, 0x01, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
            Packet::Evd { kind: 1, payload: 0x1122_3344_5566_7788 },
        ),
        (&[0x02, 0x63, 0x80 | 0x11], Packet::Bbp { size: BlockItemSize::Four, kind: 0x11 }),
        (&[0x02, 0x33], Packet::Bep { ip: false }),
        (&[0x02, 0xb3], Packet::Bep { ip: true }),
        (&[0xd9, 0x80 | 0x20, 0x05], Packet::Trig { trbv: 5, ip: true, mult: true, icnt: None }),
        (&[0xd9, 0x40, 0x01, 0x34, 0x12], Packet::Trig { trbv: 1, ip: false, mult: false, icnt: Some(0x1234) }),
    ];
    for (bytes, packet) in cases {
        let decoded: Vec<_> = PacketDecoder::new(bytes).collect();
        assert_eq!(decoded, vec![Ok((0, *packet))], "{bytes:02x?}");
        let mut encoder = PacketEncoder::new();
        encoder.encode(packet).unwrap();
        assert_eq!(encoder.bytes(), *bytes, "{packet:?}");
    }
    // BIP collides with short TNT: 0x0c is TNT outside a block, BIP id 1 inside one.
    let outside: Vec<_> = PacketDecoder::new(&[0x0c]).collect();
    assert_eq!(outside, vec![Ok((0, Packet::TntShort(Tnt { bits: 2, len: 2 })))]);
    let inside = [0x02, 0x63, 0x80, 0x0c, 0x78, 0x56, 0x34, 0x12, 0x0c, 0, 0, 0, 0, 0x02, 0x33, 0x0c];
    let decoded: Vec<Packet> = PacketDecoder::new(&inside).map(|item| item.unwrap().1).collect();
    assert_eq!(
        decoded,
        vec![
            Packet::Bbp { size: BlockItemSize::Four, kind: 0 },
            Packet::Bip { id: 1, payload: 0x1234_5678, size: 4 },
            Packet::Bip { id: 1, payload: 0, size: 4 },
            Packet::Bep { ip: false },
            Packet::TntShort(Tnt { bits: 2, len: 2 }),
        ]
    );
}

#[test]
fn errors_carry_offsets_and_decoding_resumes_at_next_psb() {
    let mut bytes = vec![];
    bytes.extend_from_slice(&retrace_decoder::packet::PSB_BYTES);
    bytes.extend_from_slice(&[0x02, 0x23, 0x59, 0x01]); // psbend, mtc
    bytes.extend_from_slice(&[0x02, 0x04, 0xff, 0xff]); // unknown extended opcode at 20
    bytes.extend_from_slice(&retrace_decoder::packet::PSB_BYTES); // at 24
    bytes.extend_from_slice(&[0x02, 0x23, 0x19, 0x01]); // psbend, truncated tsc at 42
    let items: Vec<_> = PacketDecoder::new(&bytes).collect();
    let summary: Vec<String> = items
        .iter()
        .map(|item| match item {
            Ok((offset, packet)) => format!("{offset} {}", packet.name()),
            Err(error) => format!("{} error {}", error.offset, error.kind.libipt_name()),
        })
        .collect();
    assert_eq!(summary, ["0 psb", "16 psbend", "18 mtc", "20 error bad_opc", "24 psb", "40 psbend", "42 error eos"]);
}
