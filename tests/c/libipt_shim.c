/* A thin C shim over Debian's libipt (2.0.5) packet decoder, for retrace's
 * differential tests and benchmarks. It flattens `struct pt_packet` into a
 * name and three numbers so the Rust side needs no bindgen. */
#include <intel-pt.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

struct shim_packet {
	const char *name;
	uint64_t a, b, c;
	int size;
};

struct pt_packet_decoder *shim_new(const uint8_t *buf, size_t len)
{
	struct pt_config config;

	pt_config_init(&config);
	config.begin = (uint8_t *) buf;
	config.end = (uint8_t *) buf + len;
	return pt_pkt_alloc_decoder(&config);
}

void shim_free(struct pt_packet_decoder *decoder)
{
	pt_pkt_free_decoder(decoder);
}

int shim_sync_forward(struct pt_packet_decoder *decoder)
{
	return pt_pkt_sync_forward(decoder);
}

int shim_sync_backward(struct pt_packet_decoder *decoder)
{
	return pt_pkt_sync_backward(decoder);
}

int shim_sync_set(struct pt_packet_decoder *decoder, uint64_t offset)
{
	return pt_pkt_sync_set(decoder, offset);
}

int shim_offset(struct pt_packet_decoder *decoder, uint64_t *offset)
{
	return pt_pkt_get_offset(decoder, offset);
}

int shim_error_code(int status)
{
	return (int) pt_errcode(status);
}

const char *shim_error_name(int status)
{
	switch (pt_errcode(status)) {
	case pte_eos: return "eos";
	case pte_bad_opc: return "bad_opc";
	case pte_bad_packet: return "bad_packet";
	case pte_nosync: return "nosync";
	default: return pt_errstr(pt_errcode(status));
	}
}

static void flatten(const struct pt_packet *p, struct shim_packet *out)
{
	out->a = out->b = out->c = 0;
	out->size = p->size;
	switch (p->type) {
	case ppt_pad: out->name = "pad"; break;
	case ppt_psb: out->name = "psb"; break;
	case ppt_psbend: out->name = "psbend"; break;
	case ppt_ovf: out->name = "ovf"; break;
	case ppt_stop: out->name = "stop"; break;
	case ppt_tnt_8:
	case ppt_tnt_64:
		out->name = p->type == ppt_tnt_8 ? "tnt.8" : "tnt.64";
		out->a = p->payload.tnt.payload;
		out->b = p->payload.tnt.bit_size;
		break;
	case ppt_tip:
	case ppt_tip_pge:
	case ppt_tip_pgd:
	case ppt_fup:
		out->name = p->type == ppt_tip ? "tip" : p->type == ppt_tip_pge ? "tip.pge" :
			    p->type == ppt_tip_pgd ? "tip.pgd" : "fup";
		out->a = p->payload.ip.ipc;
		out->b = p->payload.ip.ip;
		break;
	case ppt_pip:
		out->name = "pip";
		out->a = p->payload.pip.cr3;
		out->b = p->payload.pip.nr;
		break;
	case ppt_mode:
		if (p->payload.mode.leaf == pt_mol_exec) {
			out->name = "mode.exec";
			out->a = p->payload.mode.bits.exec.csl |
				 p->payload.mode.bits.exec.csd << 1;
		} else {
			out->name = "mode.tsx";
			out->a = p->payload.mode.bits.tsx.intx |
				 p->payload.mode.bits.tsx.abrt << 1;
		}
		break;
	case ppt_tsc: out->name = "tsc"; out->a = p->payload.tsc.tsc; break;
	case ppt_cbr: out->name = "cbr"; out->a = p->payload.cbr.ratio; break;
	case ppt_tma:
		out->name = "tma";
		out->a = p->payload.tma.ctc;
		out->b = p->payload.tma.fc;
		break;
	case ppt_mtc: out->name = "mtc"; out->a = p->payload.mtc.ctc; break;
	case ppt_cyc: out->name = "cyc"; out->a = p->payload.cyc.value; break;
	case ppt_vmcs: out->name = "vmcs"; out->a = p->payload.vmcs.base; break;
	case ppt_mnt: out->name = "mnt"; out->a = p->payload.mnt.payload; break;
	case ppt_exstop: out->name = "exstop"; out->a = p->payload.exstop.ip; break;
	case ppt_mwait:
		out->name = "mwait";
		out->a = p->payload.mwait.hints;
		out->b = p->payload.mwait.ext;
		break;
	case ppt_pwre:
		out->name = "pwre";
		out->a = p->payload.pwre.state;
		out->b = p->payload.pwre.sub_state;
		out->c = p->payload.pwre.hw;
		break;
	case ppt_pwrx:
		out->name = "pwrx";
		out->a = p->payload.pwrx.last;
		out->b = p->payload.pwrx.deepest;
		out->c = p->payload.pwrx.interrupt |
			 p->payload.pwrx.store << 2 |
			 p->payload.pwrx.autonomous << 3;
		break;
	case ppt_ptw:
		out->name = "ptw";
		out->a = p->payload.ptw.payload;
		out->b = p->payload.ptw.plc;
		out->c = p->payload.ptw.ip;
		break;
	default:
		out->name = "unknown";
		break;
	}
}

/* Decodes the next packet; returns its size or a negative libipt error. */
int shim_next(struct pt_packet_decoder *decoder, struct shim_packet *out)
{
	struct pt_packet packet;
	int status;

	status = pt_pkt_next(decoder, &packet, sizeof(packet));
	if (status < 0)
		return status;

	flatten(&packet, out);
	return status;
}

/* The benchmark loop: decode the whole buffer, resynchronising after errors
 * as ptdump does. Returns the packet count; *errors gets the error count. */
uint64_t shim_count_packets(const uint8_t *buf, size_t len, uint64_t *errors)
{
	struct pt_packet_decoder *decoder;
	struct pt_packet packet;
	uint64_t count = 0;

	*errors = 0;
	decoder = shim_new(buf, len);
	if (!decoder)
		return 0;

	if (pt_pkt_sync_forward(decoder) < 0)
		goto out;

	for (;;) {
		int status = pt_pkt_next(decoder, &packet, sizeof(packet));

		if (status >= 0) {
			count += 1;
			continue;
		}
		if (pt_errcode(status) == pte_eos) {
			uint64_t offset;

			if (pt_pkt_get_offset(decoder, &offset) < 0 || offset >= len)
				break;
		}
		*errors += 1;
		if (pt_pkt_sync_forward(decoder) < 0)
			break;
	}
out:
	pt_pkt_free_decoder(decoder);
	return count;
}

/* ---- Instruction flow: libipt's insn and block decoders over file sections ---- */

struct shim_file_section {
	const char *path;
	uint64_t offset;
	uint64_t size;
	uint64_t vaddr;
};

/* One image section cache for the process, as libipt's users (perf, LLDB's
 * own tools, ptxed) keep one: sections are added to it once and shared by
 * images; it keeps recently used sections mapped. */
static struct pt_image_section_cache *shim_iscache;

static struct pt_image *shim_image(const struct shim_file_section *sections, size_t count)
{
	struct pt_image *image = pt_image_alloc("retrace");
	size_t i;

	if (!image)
		return NULL;
	if (!shim_iscache)
		shim_iscache = pt_iscache_alloc("retrace");
	for (i = 0; i < count; ++i) {
		int isid = -1;

		if (shim_iscache)
			isid = pt_iscache_add_file(shim_iscache, sections[i].path, sections[i].offset,
						   sections[i].size, sections[i].vaddr);
		if (isid < 0 || pt_image_add_cached(image, shim_iscache, isid, NULL) < 0) {
			pt_image_free(image);
			return NULL;
		}
	}
	return image;
}

static void shim_flow_config(struct pt_config *config, const uint8_t *trace, size_t len,
			     uint32_t family, uint32_t model)
{
	pt_config_init(config);
	config->begin = (uint8_t *) trace;
	config->end = (uint8_t *) trace + len;
	config->cpu.vendor = pcv_intel;
	config->cpu.family = (uint16_t) family;
	config->cpu.model = (uint8_t) model;
	pt_cpu_errata(&config->errata, &config->cpu);
}

/* The last error the flow decoders met, and at which trace offset. */
static int shim_flow_last_error;
static uint64_t shim_flow_last_offset;

const char *shim_flow_last_error_name(uint64_t *offset)
{
	*offset = shim_flow_last_offset;
	return pt_errstr(pt_errcode(shim_flow_last_error));
}

/* Where the instruction decoder's items go: `width` 1, addresses of
 * instructions only; `width` 2, (ip, -error) pairs, errors included (ip 0:
 * none). At most `cap` items are written; `n` counts them all. */
struct shim_insn_sink {
	uint64_t *out;
	size_t cap;
	int64_t n;
	int width;
};

static void shim_insn_item(struct shim_insn_sink *sink, uint64_t ip, int status)
{
	if (sink->width == 1 && status < 0)
		return;
	if ((size_t) sink->n < sink->cap) {
		sink->out[sink->width * sink->n] = ip;
		if (sink->width == 2)
			sink->out[2 * sink->n + 1] = (uint64_t) (int64_t) status;
	}
	sink->n += 1;
}

/* Decodes the whole trace with the instruction decoder, events first,
 * resyncing after each error (counted in *errors, end of trace aside), until
 * synchronisation fails. With `as_lldb`, as LLDB 22 drives it: an
 * instruction returned with pts_eos is not listed and ends the run there,
 * errors are items (a failed event's without address). Returns how many
 * items there were, or a negative value if setup failed. */
static int64_t shim_insn_run(const uint8_t *trace, size_t len, const struct shim_file_section *sections,
			     size_t count, uint32_t family, uint32_t model, int as_lldb,
			     struct shim_insn_sink *sink, uint64_t *errors)
{
	struct pt_config config;
	struct pt_insn_decoder *decoder;
	struct pt_image *image;
	int status;

	*errors = 0;
	shim_flow_config(&config, trace, len, family, model);
	decoder = pt_insn_alloc_decoder(&config);
	if (!decoder)
		return -1;
	image = shim_image(sections, count);
	if (!image || pt_insn_set_image(decoder, image) < 0) {
		pt_insn_free_decoder(decoder);
		return -2;
	}
	for (;;) {
		status = pt_insn_sync_forward(decoder);
		if (status < 0)
			break;
		for (;;) {
			struct pt_insn insn;

			while (status & pts_event_pending) {
				struct pt_event event;

				status = pt_insn_event(decoder, &event, sizeof(event));
				if (status < 0)
					break;
			}
			if (status < 0) {
				shim_insn_item(sink, 0, status);
				break;
			}
			if (as_lldb && (status & pts_eos))
				break;
			memset(&insn, 0, sizeof(insn));
			status = pt_insn_next(decoder, &insn, sizeof(insn));
			if (status < 0) {
				shim_insn_item(sink, insn.ip, status);
				break;
			}
			if (as_lldb && (status & pts_eos))
				break;
			shim_insn_item(sink, insn.ip, 0);
		}
		if (status == -pte_eos && !as_lldb)
			break;
		if (status < 0 && status != -pte_eos) {
			*errors += 1;
			shim_flow_last_error = status;
			pt_insn_get_offset(decoder, &shim_flow_last_offset);
		}
	}
	pt_insn_free_decoder(decoder);
	pt_image_free(image);
	return sink->n;
}

/* Decodes with the instruction decoder: writes up to `cap` instruction
 * addresses to `out`, returns how many instructions there were (or a
 * negative libipt error if setup failed); *errors counts decode errors
 * (each followed by a resync). */
int64_t shim_insn_ips(const uint8_t *trace, size_t len, const struct shim_file_section *sections,
		      size_t count, uint32_t family, uint32_t model, uint64_t *out, size_t cap,
		      uint64_t *errors)
{
	struct shim_insn_sink sink = { out, cap, 0, 1 };

	return shim_insn_run(trace, len, sections, count, family, model, 0, &sink, errors);
}

/* Decodes with the instruction decoder driven as LLDB 22 drives it (see
 * shim_insn_run). Items, two u64 each, in `out` (at most `cap`; returns how
 * many there were):
 *   ip, 0          an instruction
 *   ip, -error     an error (ip 0: none), then a resync
 */
int64_t shim_insn_items(const uint8_t *trace, size_t len, const struct shim_file_section *sections,
			size_t count, uint32_t family, uint32_t model, uint64_t *out, size_t cap)
{
	struct shim_insn_sink sink = { out, cap, 0, 2 };
	uint64_t errors;

	return shim_insn_run(trace, len, sections, count, family, model, 1, &sink, &errors);
}

/* What the block decoder reported, four u64 per item (see shim_blk_items). */
struct shim_blk_sink {
	uint64_t *out;
	size_t cap;
	int64_t n;
};

static void shim_blk_item(struct shim_blk_sink *sink, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	if (!sink)
		return;
	if ((size_t) sink->n < sink->cap) {
		sink->out[4 * sink->n] = a;
		sink->out[4 * sink->n + 1] = b;
		sink->out[4 * sink->n + 2] = c;
		sink->out[4 * sink->n + 3] = d;
	}
	sink->n += 1;
}

/* Decodes the whole trace with the block decoder, resyncing after errors.
 * Returns the number of instructions (or a negative value if setup failed);
 * *errors counts the errors; items go to `sink` when it is not NULL. */
static int64_t shim_blk_run(const uint8_t *trace, size_t len, const struct shim_file_section *sections,
			    size_t count, uint32_t family, uint32_t model, uint64_t *errors,
			    struct shim_blk_sink *sink)
{
	struct pt_config config;
	struct pt_block_decoder *decoder;
	struct pt_image *image;
	int64_t n = 0;
	int status;

	*errors = 0;
	shim_flow_config(&config, trace, len, family, model);
	decoder = pt_blk_alloc_decoder(&config);
	if (!decoder)
		return -1;
	image = shim_image(sections, count);
	if (!image || pt_blk_set_image(decoder, image) < 0) {
		pt_blk_free_decoder(decoder);
		return -2;
	}
	for (;;) {
		uint64_t offset = 0;

		status = pt_blk_sync_forward(decoder);
		if (status < 0)
			break;
		for (;;) {
			struct pt_block block;

			memset(&block, 0, sizeof(block));
			while (status & pts_event_pending) {
				struct pt_event event;

				status = pt_blk_event(decoder, &event, sizeof(event));
				if (status < 0)
					break;
				if (event.type == ptev_overflow)
					shim_blk_item(sink, 3, event.ip_suppressed ? 0 : event.variant.overflow.ip, 0, 0);
			}
			if (status < 0)
				break;
			status = pt_blk_next(decoder, &block, sizeof(block));
			n += block.ninsn;
			if (block.ninsn > 0)
				shim_blk_item(sink, 1, block.ip, block.end_ip, block.ninsn | ((uint64_t) block.mode << 32));
			if (status < 0)
				break;
		}
		if (status == -pte_eos)
			break;
		*errors += 1;
		if (sink) {
			pt_blk_get_offset(decoder, &offset);
			shim_blk_item(sink, 2, (uint64_t) (int64_t) -status, offset, 0);
		}
	}
	pt_blk_free_decoder(decoder);
	pt_image_free(image);
	return n;
}

/* Counts instructions with the block decoder (libipt's fastest). */
int64_t shim_blk_count(const uint8_t *trace, size_t len, const struct shim_file_section *sections,
		       size_t count, uint32_t family, uint32_t model, uint64_t *errors)
{
	return shim_blk_run(trace, len, sections, count, family, model, errors, NULL);
}

/* Decodes with the block decoder and records what it reports, four u64 per
 * item in `out` (at most `cap` items; returns how many there were):
 *   1, ip, end_ip, ninsn | mode << 32    a block of sequential instructions
 *                           (mode: libipt's pt_exec_mode)
 *   2, -error, offset, 0    an error (decoding resumes at the next PSB)
 *   3, ip, 0, 0             an overflow event (ip 0: resolved disabled)
 */
int64_t shim_blk_items(const uint8_t *trace, size_t len, const struct shim_file_section *sections,
		       size_t count, uint32_t family, uint32_t model, uint64_t *out, size_t cap)
{
	struct shim_blk_sink sink = { out, cap, 0 };
	uint64_t errors;
	int64_t status;

	status = shim_blk_run(trace, len, sections, count, family, model, &errors, &sink);
	return status < 0 ? status : sink.n;
}
