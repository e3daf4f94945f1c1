/* retrace's Valgrind tool: writes, for each process it runs in, a binary log
 * of the program's own control flow, from which retrace-collector writes
 * genuine Intel PT (collector/src/valgrind/; the format is documented
 * there and in docs/ARCHITECTURE.md).
 *
 * What is logged (all little-endian):
 *   'B' u32 id u64 entry u64 next u16 n, n x (u64 address, u8 length, bytes),
 *        u16 m, m x (u16 index, u64 to)
 *        a translated superblock: its guest instructions in execution order,
 *        where it goes when it runs to its end if that is one address (a
 *        direct jump, call or fall-through; else 0), and its side exits: at
 *        its instruction `index`, for `to` (0: not one address);
 *   'E' u32 id u8 way    a superblock of the program's own code was entered
 *                        (and left: way 0, by its end or as an 'X' says;
 *                        way k, by its side exit k-1);
 *   0x80 | way           the superblock at the address the last one goes to
 *                        (its `next`, or the side exit it took) was entered,
 *                        and left as `way` says (0..127): one byte for most
 *                        superblocks run;
 *   'X' u16 exit         it left by its side exit `exit` (when the byte of
 *                        its entry could not say so);
 *   'G'                  code that is not the program's ran (Valgrind's own
 *                        text, e.g. the vsyscall page's redirection);
 *   'T' u32 number u32 tid   the thread `number` (numbered here: Valgrind
 *                        reuses its thread slots) runs from now on;
 *   'S' u32 signal u64 ip    a signal is delivered at ip (not executed yet);
 *   'Q' u32 number u64 ip   the thread ended at ip (after its exit system
 *                        call, or where a fatal signal stopped it);
 *   'M' u64 start u64 length u64 offset u8 prot u16 n, n bytes of path
 *                        a file mapped into the program;
 *   'L'                  --retrace-max-insns was reached: the program is
 *                        ended (the log holds at least that many);
 *   'F' u64 ip           the program ends (the last record) with the
 *                        running thread at ip: after its exit system call,
 *                        or at the instruction a fatal signal stopped.
 * With --retrace-full=yes (full state), besides:
 *   'R' u16 index u8 n, n x (u8 register, u64 value)
 *        the instruction `index` of the superblock entered last changed
 *        these registers (numbered as collector/src/valgrind/log.rs says);
 *   'W' u16 index u64 address u16 size, bytes   it wrote memory (the bytes
 *        as they are after it);
 *   'D' u16 index u64 address u16 size          it read memory;
 *   'r' u32 number u8 n, n x (u8 register, u64 value)   the thread's
 *        registers changed other than by an instruction (a system call's
 *        result, a signal delivered, its first registers);
 *   'K' u32 number u64 address u64 size, bytes  memory written other than
 *        by an instruction (by the kernel in the thread's system call, a
 *        signal frame; number 0: before the program's first instruction);
 *   'Z' u64 start u64 length    memory mapped zero-filled (anonymous, brk);
 *   'U' u64 start u64 length    memory unmapped;
 *   'C' u64 from u64 to u64 length   memory moved (mremap);
 *   'A' u64 start u64 length u8 prot   memory mapped or its protection
 *        changed: readable 1, writable 2, executable 4; and what it is,
 *        8: the heap (brk), 16: the main stack (none: as it was); 32:
 *        mapped only as touched, down from its top (the stack's reserve).
 * The log starts with "RTVGLOG2" and a 'P' u32 pid record. With
 * --retrace-server=127.0.0.1:PORT each program image's log is a TCP
 * connection to retrace (which converts it while the program runs; a
 * full socket makes the program wait, so memory stays bounded), with
 * --retrace-out=PATH a file PATH.<pid>.<n>. A forked child logs nothing.
 * The tool keeps to instrumentation and the log: everything else is Rust.
 */

#include "pub_tool_basics.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_aspacemgr.h"
#include "pub_tool_machine.h"
#include "pub_tool_options.h"
#include "pub_tool_threadstate.h"
#include "pub_tool_vki.h"
#include "pub_tool_vkiscnums.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_clreq.h"
#include "pub_tool_gdbserver.h"
#include "libvex_guest_amd64.h"

/* Exported by Valgrind's core (its --log-socket and its own files use
   them) though not declared in the tool headers. */
extern Int VG_(connect_via_socket)(const HChar* str);
extern Int VG_(safe_fd)(Int oldfd);

static const HChar* out_format = NULL;
static const HChar* server = NULL;
static ULong max_instructions = 0;
static ULong instructions = 0;
/* Instructions of each superblock, by id (for --retrace-max-insns). */
static UShort* lengths = NULL;
static UInt lengths_size = 0;
static Int log_fd = -1;
static UChar buffer[1 << 20];
static UInt used = 0;
static UInt next_superblock = 0;
/* Our thread numbers, by Valgrind thread slot. */
#define MAX_SLOTS 10000
static UInt number_of_slot[MAX_SLOTS];
static UInt next_number = 1;
static ThreadId running_slot = VG_INVALID_THREADID;
/* The thread that ran last (kept when it ends: a fatal signal ends every
   thread before the tool's fini). */
static ThreadId last_slot = VG_INVALID_THREADID;
/* Each superblock's entry address and static next address, by id. */
static Addr* entries = NULL;
static Addr* nexts = NULL;
static UInt tables_size = 0;
/* Where the program goes next, when one address (0: not known). */
static Addr predicted = 0;
/* Where the byte saying how the superblock entered last was left is in
   `buffer`, while nothing else was written after it (else -1), and the
   largest way it can hold. */
static Int way_slot = -1;
static UInt way_slot_max = 0;
static Bool in_foreign_code = False;
/* --retrace-full=yes: every register and byte the program changes. */
static Bool full = False;
/* By slot: whether its registers were logged since it began. */
static Bool pieces_known[MAX_SLOTS];
/* By slot: whether its thread was named in a 'T' record since it began
   (its registers are logged from then on). */
static Bool introduced[MAX_SLOTS];

static void flush(void)
{
   UInt done = 0;
   if (log_fd < 0) {
      used = 0;
      way_slot = -1;
      return;
   }
   while (done < used && log_fd >= 0) {
      Int n = VG_(write)(log_fd, buffer + done, used - done);
      if (n <= 0) {
         VG_(umsg)("retrace: cannot write the log\n");
         VG_(exit)(1);
      }
      done += n;
   }
   used = 0;
   way_slot = -1;
}

/* Room for `n` more bytes in the buffer (n <= its size): where they go.
   The caller fills them; the fixed-size fields are stored with
   __builtin_memcpy of a constant size, which gcc turns into one move. */
static inline UChar* reserve(UInt n)
{
   UChar* at;
   way_slot = -1;
   if (used + n > sizeof buffer)
      flush();
   at = buffer + used;
   used += n;
   return at;
}

static inline void put(const void* bytes, UInt n)
{
   VG_(memcpy)(reserve(n), bytes, n);
}

/* Any number of bytes (more than the buffer holds go straight out). */
static void put_bytes(const void* bytes, ULong n)
{
   if (n <= sizeof buffer) {
      put(bytes, (UInt)n);
      return;
   }
   flush();
   while (n > 0 && log_fd >= 0) {
      Int done = VG_(write)(log_fd, bytes, n > (1 << 30) ? (1 << 30) : (UInt)n);
      if (done <= 0) {
         VG_(umsg)("retrace: cannot write the log\n");
         VG_(exit)(1);
      }
      bytes = (const UChar*)bytes + done;
      n -= done;
   }
}

static inline void put_u8(UChar v) { *reserve(1) = v; }
static inline void put_u16(UShort v) { __builtin_memcpy(reserve(2), &v, 2); }
static inline void put_u32(UInt v) { __builtin_memcpy(reserve(4), &v, 4); }
static inline void put_u64(ULong v) { __builtin_memcpy(reserve(8), &v, 8); }

/* Connects to retrace, or opens <out>.<pid>.<n>, the first n not taken
   (an exec keeps the pid). */
static void open_log(void)
{
   HChar path[4096];
   Int n;
   if (server != NULL) {
      Int fd = VG_(connect_via_socket)(server);
      if (fd < 0) {
         VG_(umsg)("retrace: cannot connect to retrace at %s\n", server);
         VG_(exit)(1);
      }
      /* Out of the program's way (Valgrind's reserved descriptors) and
         closed by an exec, so retrace sees each image's log end. */
      log_fd = VG_(safe_fd)(fd);
      if (VG_(write)(log_fd, "RTVGLOG2", 8) != 8) {
         VG_(umsg)("retrace: cannot write to retrace at %s\n", server);
         VG_(exit)(1);
      }
      put_u8('P');
      put_u32((UInt)VG_(getpid)());
      return;
   }
   for (n = 0; n < 1000; n++) {
      VG_(snprintf)(path, sizeof path, "%s.%d.%d", out_format, VG_(getpid)(), n);
      SysRes res = VG_(open)(path, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_EXCL, 0600);
      if (!sr_isError(res)) {
         log_fd = sr_Res(res);
         /* Records made before (the startup mappings) follow the magic. */
         if (VG_(write)(log_fd, "RTVGLOG2", 8) != 8) {
            VG_(umsg)("retrace: cannot write the log at %s\n", path);
            VG_(exit)(1);
         }
         return;
      }
   }
   VG_(umsg)("retrace: cannot create a log at %s\n", path);
   VG_(exit)(1);
}

static void log_mapping(Addr a, SizeT len)
{
   NSegment const* seg = VG_(am_find_nsegment)(a);
   const HChar* name;
   UShort n;
   if (seg == NULL || seg->kind != SkFileC)
      return;
   name = VG_(am_get_filename)(seg);
   if (name == NULL)
      return;
   n = (UShort)VG_(strlen)(name);
   put_u8('M');
   put_u64(a);
   put_u64(len);
   put_u64(seg->offset + (a - seg->start));
   put_u8((seg->hasR ? 1 : 0) | (seg->hasW ? 2 : 0) | (seg->hasX ? 4 : 0));
   put_u16(n);
   put(name, n);
}

static void zero_mapped(Addr a, SizeT len, Bool readable_now);
static void kernel_wrote(ThreadId slot, Addr a, SizeT len);
static void range_record(UChar tag, Addr a, SizeT len);

/* What the program may do with memory (with `kind`: what it is). */
static void protected(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, UChar kind)
{
   if (!full || len == 0)
      return;
   put_u8('A');
   put_u64(a);
   put_u64(len);
   put_u8((rr ? 1 : 0) | (ww ? 2 : 0) | (xx ? 4 : 0) | kind);
}

#define KIND_HEAP 8
#define KIND_STACK 16
/* Mapped only as the program touches it, down from its top (the main
   stack's reservation: Valgrind maps its pages on a fault, as the kernel
   grows a stack, and tells no tool). */
#define KIND_GROWS 32

static Bool is_file_mapping(Addr a)
{
   NSegment const* seg = VG_(am_find_nsegment)(a);
   return seg != NULL && seg->kind == SkFileC;
}

static void new_mem_startup(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, ULong di_handle)
{
   log_mapping(a, len);
   /* Full state: a file's unwritable mapping is the file's bytes; what
      may differ (data, bss, the stack) is logged as it is. */
   if (!full || len == 0)
      return;
   if (!is_file_mapping(a))
      zero_mapped(a, len, rr);
   else if (ww && rr)
      kernel_wrote(VG_INVALID_THREADID, a, len);
   /* The main stack grows down into the reservation below it (Valgrind
      maps its pages as the program touches them, with no event for a
      tool): zeros, as the kernel's growing stack gives them. */
   if (a > 0) {
      NSegment const* below = VG_(am_find_nsegment)(a - 1);
      if (below != NULL && below->kind == SkResvn && below->smode == SmUpper && below->end + 1 == a) {
         range_record('Z', below->start, below->end + 1 - below->start);
         protected(below->start, below->end + 1 - below->start, True, True, False, KIND_STACK | KIND_GROWS);
         protected(a, len, rr, ww, xx, KIND_STACK);
         return;
      }
   }
   protected(a, len, rr, ww, xx, 0);
}

static void new_mem_mmap(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, ULong di_handle)
{
   log_mapping(a, len);
   if (full && !is_file_mapping(a))
      zero_mapped(a, len, False);
   protected(a, len, rr, ww, xx, 0);
}

static void change_mem_mprotect(Addr a, SizeT len, Bool rr, Bool ww, Bool xx)
{
   protected(a, len, rr, ww, xx, 0);
}

static UInt thread_number(ThreadId slot)
{
   tl_assert(slot < MAX_SLOTS);
   if (number_of_slot[slot] == 0)
      number_of_slot[slot] = next_number++;
   return number_of_slot[slot];
}

static void log_thread_state(ThreadId slot);

static void start_client_code(ThreadId slot, ULong blocks_done)
{
   if (slot != running_slot) {
      running_slot = slot;
      last_slot = slot;
      predicted = 0;
      put_u8('T');
      put_u32(thread_number(slot));
      put_u32((UInt)VG_(gettid)());
      introduced[slot] = True;
   }
   /* Whatever changed its registers since it last ran (a system call, a
      signal delivered, its creation). */
   log_thread_state(slot);
}

static void thread_create(ThreadId parent, ThreadId child)
{
   tl_assert(child < MAX_SLOTS);
   number_of_slot[child] = next_number++;
}

static void thread_exit(ThreadId slot)
{
   put_u8('Q');
   put_u32(thread_number(slot));
   put_u64(VG_(get_IP)(slot));
   number_of_slot[slot] = 0;
   pieces_known[slot] = False;
   introduced[slot] = False;
   if (running_slot == slot)
      running_slot = VG_INVALID_THREADID;
}

/* A signal frame being built on thread frame_slot's stack, below
   frame_above (the interrupted stack pointer; 0: none). Valgrind keeps
   its own part of the frame (the saved guest state) in the program's
   stack without telling the tool: the whole frame is logged once the
   handler's first superblock is entered. */
static Addr frame_above = 0;
static ThreadId frame_slot = VG_INVALID_THREADID;

static void log_frame(void)
{
   Addr sp = VG_(get_SP)(frame_slot);
   if (sp < frame_above && frame_above - sp <= 256 * 1024)
      kernel_wrote(frame_slot, sp, frame_above - sp);
   frame_above = 0;
}

static void deliver_signal(ThreadId slot, Int signal, Bool alt_stack)
{
   /* (On an alternate stack the frame's extent is not the interrupted
      stack pointer's: what Valgrind tells of it is what is logged.) */
   if (full && !alt_stack) {
      frame_above = VG_(get_SP)(slot);
      frame_slot = slot;
   }
   start_client_code(slot, 0);
   predicted = 0;
   put_u8('S');
   put_u32((UInt)signal);
   put_u64(VG_(get_IP)(slot));
}

static VG_REGPARM(1) void entered(UWord id)
{
   in_foreign_code = False;
   if (frame_above != 0)
      log_frame();
   if (predicted != 0 && predicted == entries[id]) {
      UChar* at = reserve(1);
      *at = 0x80;
      way_slot = (Int)(at - buffer);
      way_slot_max = 0x7f;
   } else {
      UInt number = (UInt)id;
      UChar* at = reserve(6);
      at[0] = 'E';
      __builtin_memcpy(at + 1, &number, 4);
      at[5] = 0;
      way_slot = (Int)(at - buffer) + 5;
      way_slot_max = 0xff;
   }
   predicted = nexts[id];
   if (max_instructions != 0) {
      instructions += lengths[id];
      if (instructions >= max_instructions) {
         put_u8('L');
         flush();
         VG_(exit)(0);
      }
   }
}

/* The superblock entered last leaves by its side exit `exit`, for `to`. */
static VG_REGPARM(2) void left_at(UWord exit, UWord to)
{
   if (way_slot >= 0 && exit + 1 <= way_slot_max) {
      buffer[way_slot] = (UChar)(buffer[way_slot] | (exit + 1));
   } else {
      put_u8('X');
      put_u16((UShort)exit);
   }
   way_slot = -1;
   predicted = to;
}

static void entered_foreign(void)
{
   predicted = 0;
   if (!in_foreign_code) {
      in_foreign_code = True;
      put_u8('G');
   }
}

static void pre_syscall(ThreadId tid, UInt syscallno, UWord* args, UInt nArgs)
{
   /* The log must be complete before the image goes (execve) or the
      process ends; a child of fork starts a log of its own. */
   if (syscallno == __NR_execve || syscallno == __NR_execveat || syscallno == __NR_exit_group)
      flush();
}

static void post_syscall(ThreadId tid, UInt syscallno, UWord* args, UInt nArgs, SysRes res)
{
}

static void at_fork_child(ThreadId tid)
{
   /* The parent's buffered records are the parent's; a forked child is
      not recorded (as with retrace's other backends). */
   used = 0;
   if (log_fd >= 0)
      VG_(close)(log_fd);
   log_fd = -1;
   running_slot = VG_INVALID_THREADID;
}

static void at_fork_pre(ThreadId tid)
{
   flush();
}

/* ---- Full state (--retrace-full=yes) ----

   Registers are logged as 8-byte pieces, numbered for retrace:
     0..15   rax rbx rcx rdx rsi rdi rbp rsp r8..r15 (GDB's order)
     16      rflags (computed from Valgrind's flags thunk, DF, ID, AC)
     17, 18  fs_base, gs_base
     32+2n, 33+2n   xmm n, bytes 0..7 and 8..15 (n = 0..15)
     64+2n, 65+2n   ymm n, bytes 16..23 and 24..31
     96      Valgrind's SSE rounding mode
     100+k   x87 register k (physical), as Valgrind keeps it (a double)
     108 FTOP, 109 the eight tag bytes, 110 x87 rounding, 111 C3..C0
   Each thread's last logged values are kept here; an instruction's
   helper compares the pieces it may have written and logs those that
   changed. */
#define PIECES 112
#define PIECE_RFLAGS 16
#define STATE_UNITS 128
#define NOT_LOGGED 0xff
static Int piece_offset[PIECES];
static UChar piece_of_unit[STATE_UNITS];
/* The guest state's range the flags are computed from. */
static Int flags_from = 0, flags_to = 0;
/* By slot: the values last logged. */
static ULong* logged_pieces[MAX_SLOTS];

static void set_piece(UInt piece, Int offset)
{
   piece_offset[piece] = offset;
   piece_of_unit[offset / 8] = (UChar)piece;
}

static void init_pieces(void)
{
   Int k;
   const Int gprs[16] = {
      offsetof(VexGuestAMD64State, guest_RAX), offsetof(VexGuestAMD64State, guest_RBX),
      offsetof(VexGuestAMD64State, guest_RCX), offsetof(VexGuestAMD64State, guest_RDX),
      offsetof(VexGuestAMD64State, guest_RSI), offsetof(VexGuestAMD64State, guest_RDI),
      offsetof(VexGuestAMD64State, guest_RBP), offsetof(VexGuestAMD64State, guest_RSP),
      offsetof(VexGuestAMD64State, guest_R8), offsetof(VexGuestAMD64State, guest_R9),
      offsetof(VexGuestAMD64State, guest_R10), offsetof(VexGuestAMD64State, guest_R11),
      offsetof(VexGuestAMD64State, guest_R12), offsetof(VexGuestAMD64State, guest_R13),
      offsetof(VexGuestAMD64State, guest_R14), offsetof(VexGuestAMD64State, guest_R15),
   };
   const Int flags[7] = {
      offsetof(VexGuestAMD64State, guest_CC_OP), offsetof(VexGuestAMD64State, guest_CC_DEP1),
      offsetof(VexGuestAMD64State, guest_CC_DEP2), offsetof(VexGuestAMD64State, guest_CC_NDEP),
      offsetof(VexGuestAMD64State, guest_DFLAG), offsetof(VexGuestAMD64State, guest_IDFLAG),
      offsetof(VexGuestAMD64State, guest_ACFLAG),
   };
   tl_assert(sizeof(VexGuestAMD64State) <= STATE_UNITS * 8);
   for (k = 0; k < STATE_UNITS; k++)
      piece_of_unit[k] = NOT_LOGGED;
   for (k = 0; k < PIECES; k++)
      piece_offset[k] = -1;
   for (k = 0; k < 16; k++)
      set_piece(k, gprs[k]);
   flags_from = flags[0];
   flags_to = flags[0] + 8;
   for (k = 0; k < 7; k++) {
      piece_of_unit[flags[k] / 8] = PIECE_RFLAGS;
      if (flags[k] < flags_from)
         flags_from = flags[k];
      if (flags[k] + 8 > flags_to)
         flags_to = flags[k] + 8;
   }
   set_piece(17, offsetof(VexGuestAMD64State, guest_FS_CONST));
   set_piece(18, offsetof(VexGuestAMD64State, guest_GS_CONST));
   for (k = 0; k < 16; k++) {
      Int ymm = offsetof(VexGuestAMD64State, guest_YMM0) + 32 * k;
      set_piece(32 + 2 * k, ymm);
      set_piece(33 + 2 * k, ymm + 8);
      set_piece(64 + 2 * k, ymm + 16);
      set_piece(65 + 2 * k, ymm + 24);
   }
   set_piece(96, offsetof(VexGuestAMD64State, guest_SSEROUND));
   for (k = 0; k < 8; k++)
      set_piece(100 + k, offsetof(VexGuestAMD64State, guest_FPREG) + 8 * k);
   set_piece(108, offsetof(VexGuestAMD64State, guest_FTOP));
   set_piece(109, offsetof(VexGuestAMD64State, guest_FPTAG));
   set_piece(110, offsetof(VexGuestAMD64State, guest_FPROUND));
   set_piece(111, offsetof(VexGuestAMD64State, guest_FC3210));
}

static inline ULong piece_value(const VexGuestAMD64State* state, UInt piece)
{
   if (piece == PIECE_RFLAGS)
      return LibVEX_GuestAMD64_get_rflags(state);
   return *(const ULong*)((const UChar*)state + piece_offset[piece]);
}

static ULong* pieces_of(ThreadId slot)
{
   tl_assert(slot < MAX_SLOTS);
   if (logged_pieces[slot] == NULL)
      logged_pieces[slot] = VG_(malloc)("retrace.pieces", PIECES * sizeof(ULong));
   return logged_pieces[slot];
}

/* Logs the pieces of `state` in `lo`/`hi` (bit p: piece p, p < 64 in lo)
   that differ from what was logged last for `slot`: as 'R' with `index`,
   or as 'r' for the thread when index < 0. */
static void log_changed(ThreadId slot, const VexGuestAMD64State* state, Int index, ULong lo, ULong hi)
{
   UChar record[8 + PIECES * 9];
   UInt n = 0, used_bytes;
   UInt p;
   ULong* last = pieces_of(slot);
   Bool known = pieces_known[slot];
   if (index >= 0) {
      UShort i = (UShort)index;
      record[0] = 'R';
      VG_(memcpy)(record + 1, &i, 2);
      used_bytes = 4;
   } else {
      UInt number = thread_number(slot);
      record[0] = 'r';
      VG_(memcpy)(record + 1, &number, 4);
      used_bytes = 6;
   }
   /* The set bits of lo, then of hi: pieces in increasing order. */
   while (lo != 0 || hi != 0) {
      ULong value;
      if (lo != 0) {
         p = (UInt)__builtin_ctzll(lo);
         lo &= lo - 1;
      } else {
         p = 64 + (UInt)__builtin_ctzll(hi);
         hi &= hi - 1;
      }
      if (p >= PIECES || (piece_offset[p] < 0 && p != PIECE_RFLAGS))
         continue;
      value = piece_value(state, p);
      if (known && value == last[p])
         continue;
      last[p] = value;
      record[used_bytes] = (UChar)p;
      VG_(memcpy)(record + used_bytes + 1, &value, 8);
      used_bytes += 9;
      n++;
   }
   pieces_known[slot] = True;
   if (n == 0)
      return;
   record[index >= 0 ? 3 : 5] = (UChar)n;
   put(record, used_bytes);
}

/* Every piece of thread `slot` that changed since it was logged (or all,
   the first time): what changed other than by an instruction. */
static void log_thread_state(ThreadId slot)
{
   VexGuestAMD64State state;
   if (!full || slot == VG_INVALID_THREADID || slot >= MAX_SLOTS || !introduced[slot])
      return;
   VG_(get_shadow_regs_area)(slot, (UChar*)&state, 0, 0, sizeof state);
   log_changed(slot, &state, -1, ~0ULL, ~0ULL);
}

/* The instruction `index` of the running superblock may have written the
   pieces in lo/hi. */
static void regs_written(HWord state, HWord index, HWord lo, HWord hi)
{
   if (running_slot == VG_INVALID_THREADID)
      return;
   log_changed(running_slot, (const VexGuestAMD64State*)state, (Int)index, lo, hi);
}

/* The last write to memory (an instruction's or the kernel's), for
   the gdbserver monitor command `retrace last-write` (tests read the same
   bytes on a replay). */
static Addr last_write_address = 0;
static ULong last_write_size = 0;

/* An access record: tag, u16 index, u64 address, u16 size (13 bytes),
   then `copied` bytes from the address. */
static inline void put_access(UChar tag, HWord index, HWord address, HWord size, UInt copied)
{
   UChar* at = reserve(13 + copied);
   UShort i = (UShort)index, n = (UShort)size;
   ULong a = address;
   at[0] = tag;
   __builtin_memcpy(at + 1, &i, 2);
   __builtin_memcpy(at + 3, &a, 8);
   __builtin_memcpy(at + 11, &n, 2);
   if (copied == 8)
      __builtin_memcpy(at + 13, (const void*)address, 8);
   else if (copied == 4)
      __builtin_memcpy(at + 13, (const void*)address, 4);
   else if (copied > 0)
      VG_(memcpy)(at + 13, (const void*)address, copied);
}

static VG_REGPARM(3) void stored(HWord index, HWord address, HWord size)
{
   last_write_address = address;
   last_write_size = size;
   put_access('W', index, address, size, (UShort)size);
}

static VG_REGPARM(3) void loaded(HWord index, HWord address, HWord size)
{
   put_access('D', index, address, size, 0);
}

static void kernel_wrote(ThreadId slot, Addr a, SizeT len)
{
   last_write_address = a;
   last_write_size = len;
   put_u8('K');
   put_u32(slot == VG_INVALID_THREADID ? 0 : thread_number(slot));
   put_u64(a);
   put_u64(len);
   put_bytes((const void*)a, len);
}

static void post_mem_write(CorePart part, ThreadId slot, Addr a, SizeT len)
{
   if (full && len > 0)
      kernel_wrote(slot, a, len);
}

static void post_reg_write(CorePart part, ThreadId slot, PtrdiffT offset, SizeT size)
{
   log_thread_state(slot);
}

static void range_record(UChar tag, Addr a, SizeT len)
{
   if (!full || len == 0)
      return;
   put_u8(tag);
   put_u64(a);
   put_u64(len);
}

/* Zero-filled memory mapped at `a`; what is already written in it (a
   startup mapping: the stack) logged as the kernel's. */
static void zero_mapped(Addr a, SizeT len, Bool readable_now)
{
   Addr page;
   range_record('Z', a, len);
   if (!readable_now)
      return;
   for (page = a; page < a + len; page += 4096) {
      const ULong* words = (const ULong*)page;
      SizeT size = a + len - page < 4096 ? a + len - page : 4096;
      SizeT k;
      for (k = 0; k < size / 8; k++) {
         if (words[k] != 0) {
            kernel_wrote(VG_INVALID_THREADID, page, size);
            break;
         }
      }
   }
}

static void new_mem_brk(Addr a, SizeT len, ThreadId slot)
{
   range_record('Z', a, len);
   protected(a, len, True, True, False, KIND_HEAP);
}

static void die_mem(Addr a, SizeT len)
{
   range_record('U', a, len);
}

static void copy_mem_remap(Addr from, Addr to, SizeT len)
{
   if (!full || len == 0)
      return;
   put_u8('C');
   put_u64(from);
   put_u64(to);
   put_u64(len);
}

/* The pieces a write of `size` bytes at guest state `offset` touches. */
static void mark_written(Int offset, Int size, ULong* lo, ULong* hi)
{
   Int unit;
   if (offset < 0 || size <= 0)
      return;
   for (unit = offset / 8; unit <= (offset + size - 1) / 8 && unit < STATE_UNITS; unit++) {
      UChar p = piece_of_unit[unit];
      if (p == NOT_LOGGED)
         continue;
      if (p < 64)
         *lo |= 1ULL << p;
      else
         *hi |= 1ULL << (p - 64);
   }
}

/* Adds the helper logging the pieces instruction `index` wrote so far. */
static void flush_written(IRSB* out, Int index, ULong* lo, ULong* hi)
{
   IRDirty* d;
   Int from = 1 << 30, to = 0, p;
   if (index < 0 || (*lo == 0 && *hi == 0))
      return;
   for (p = 0; p < PIECES; p++) {
      if (!((p < 64 ? *lo >> p : *hi >> (p - 64)) & 1))
         continue;
      if (p == PIECE_RFLAGS) {
         if (flags_from < from)
            from = flags_from;
         if (flags_to > to)
            to = flags_to;
      } else if (piece_offset[p] >= 0) {
         if (piece_offset[p] < from)
            from = piece_offset[p];
         if (piece_offset[p] + 8 > to)
            to = piece_offset[p] + 8;
      }
   }
   d = unsafeIRDirty_0_N(0, "regs_written", VG_(fnptr_to_fnentry)(&regs_written),
                         mkIRExprVec_4(IRExpr_GSPTR(), mkIRExpr_HWord((HWord)index), mkIRExpr_HWord(*lo), mkIRExpr_HWord(*hi)));
   /* It reads the guest state: the pieces must be there, not in temps. */
   d->nFxState = 1;
   VG_(memset)(&d->fxState[0], 0, sizeof d->fxState[0]);
   d->fxState[0].fx = Ifx_Read;
   d->fxState[0].offset = (UShort)from;
   d->fxState[0].size = (UShort)(to - from);
   addStmtToIRSB(out, IRStmt_Dirty(d));
   *lo = 0;
   *hi = 0;
}

/* Adds a call of `helper` (stored or loaded) for `size` bytes at `address`,
   when `guard` holds (NULL: always). */
static void add_access(IRSB* out, const HChar* name, void* helper, Int index, IRExpr* address, Int size, IRExpr* guard)
{
   IRDirty* d;
   if (size <= 0)
      return;
   d = unsafeIRDirty_0_N(3, name, VG_(fnptr_to_fnentry)(helper),
                         mkIRExprVec_3(mkIRExpr_HWord((HWord)index), deepCopyIRExpr(address), mkIRExpr_HWord((HWord)size)));
   if (guard != NULL)
      d->guard = deepCopyIRExpr(guard);
   addStmtToIRSB(out, IRStmt_Dirty(d));
}

/* Full state: what statement `st` (of instruction `index`, already
   added to `out`) wrote or read. */
static void instrument_effects(IRSB* out, IRStmt* st, Int index, ULong* lo, ULong* hi)
{
   switch (st->tag) {
   case Ist_Put:
      mark_written(st->Ist.Put.offset, sizeofIRType(typeOfIRExpr(out->tyenv, st->Ist.Put.data)), lo, hi);
      break;
   case Ist_PutI: {
      IRRegArray* array = st->Ist.PutI.details->descr;
      mark_written(array->base, array->nElems * sizeofIRType(array->elemTy), lo, hi);
      break;
   }
   case Ist_WrTmp:
      if (st->Ist.WrTmp.data->tag == Iex_Load)
         add_access(out, "loaded", &loaded, index, st->Ist.WrTmp.data->Iex.Load.addr, sizeofIRType(st->Ist.WrTmp.data->Iex.Load.ty), NULL);
      break;
   case Ist_LoadG: {
      IRLoadG* load = st->Ist.LoadG.details;
      IRType ty = Ity_INVALID, widened = Ity_INVALID;
      typeOfIRLoadGOp(load->cvt, &widened, &ty);
      add_access(out, "loaded", &loaded, index, load->addr, sizeofIRType(ty), load->guard);
      break;
   }
   case Ist_Store:
      add_access(out, "stored", &stored, index, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(out->tyenv, st->Ist.Store.data)), NULL);
      break;
   case Ist_StoreG: {
      IRStoreG* store = st->Ist.StoreG.details;
      add_access(out, "stored", &stored, index, store->addr, sizeofIRType(typeOfIRExpr(out->tyenv, store->data)), store->guard);
      break;
   }
   case Ist_CAS: {
      IRCAS* cas = st->Ist.CAS.details;
      Int size = sizeofIRType(typeOfIRExpr(out->tyenv, cas->dataLo)) * (cas->dataHi != NULL ? 2 : 1);
      add_access(out, "loaded", &loaded, index, cas->addr, size, NULL);
      add_access(out, "stored", &stored, index, cas->addr, size, NULL);
      break;
   }
   case Ist_LLSC:
      if (st->Ist.LLSC.storedata == NULL)
         add_access(out, "loaded", &loaded, index, st->Ist.LLSC.addr, sizeofIRType(typeOfIRTemp(out->tyenv, st->Ist.LLSC.result)), NULL);
      else
         add_access(out, "stored", &stored, index, st->Ist.LLSC.addr, sizeofIRType(typeOfIRExpr(out->tyenv, st->Ist.LLSC.storedata)), NULL);
      break;
   case Ist_Dirty: {
      IRDirty* d = st->Ist.Dirty.details;
      Int k;
      for (k = 0; k < d->nFxState; k++) {
         if (d->fxState[k].fx == Ifx_Write || d->fxState[k].fx == Ifx_Modify) {
            Int r;
            for (r = 0; r <= d->fxState[k].nRepeats; r++)
               mark_written(d->fxState[k].offset + r * d->fxState[k].repeatLen, d->fxState[k].size, lo, hi);
         }
      }
      if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify)
         add_access(out, "loaded", &loaded, index, d->mAddr, d->mSize, d->guard);
      if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify)
         add_access(out, "stored", &stored, index, d->mAddr, d->mSize, d->guard);
      break;
   }
   default:
      break;
   }
}

static Bool is_client_code(Addr a)
{
   NSegment const* seg = VG_(am_find_nsegment)(a);
   return seg != NULL && (seg->kind == SkFileC || seg->kind == SkAnonC || seg->kind == SkShmC);
}

/* Side exits that stay in the program's code (a conditional branch, a
   REP instruction's next iteration) go to one address; others (0) are
   not followed. */
static Addr exit_target(IRStmt* st)
{
   return st->Ist.Exit.jk == Ijk_Boring ? (Addr)st->Ist.Exit.dst->Ico.U64 : 0;
}

static IRSB* instrument(VgCallbackClosure* closure, IRSB* in, const VexGuestLayout* layout,
                        const VexGuestExtents* extents, const VexArchInfo* arch,
                        IRType guest_word, IRType host_word)
{
   IRSB* out = deepCopyIRSBExceptStmts(in);
   Int i = 0;
   Int exits = 0;
   /* Full state: the instruction the statements are of, and the pieces
      it wrote since they were last logged. */
   Int index = -1;
   ULong written_lo = 0, written_hi = 0;
   UInt id;
   Addr entry;
   Bool ours;

   /* Statements before the first instruction mark. */
   while (i < in->stmts_used && in->stmts[i]->tag != Ist_IMark) {
      addStmtToIRSB(out, in->stmts[i]);
      i++;
   }
   if (i == in->stmts_used)
      return in;
   entry = (Addr)in->stmts[i]->Ist.IMark.addr;
   ours = is_client_code(entry);
   if (!ours) {
      IRDirty* d = unsafeIRDirty_0_N(0, "entered_foreign", VG_(fnptr_to_fnentry)(&entered_foreign), mkIRExprVec_0());
      addStmtToIRSB(out, IRStmt_Dirty(d));
      for (; i < in->stmts_used; i++)
         addStmtToIRSB(out, in->stmts[i]);
      return out;
   }

   id = next_superblock++;
   if (id >= tables_size) {
      tables_size = tables_size ? 2 * tables_size : 4096;
      entries = VG_(realloc)("retrace.entries", entries, tables_size * sizeof *entries);
      nexts = VG_(realloc)("retrace.nexts", nexts, tables_size * sizeof *nexts);
   }
   entries[id] = entry;
   /* A direct jump, call or fall-through: one address. System calls and
      anything else the kernel or Valgrind may redirect: not known. */
   nexts[id] = 0;
   if (in->next->tag == Iex_Const && (in->jumpkind == Ijk_Boring || in->jumpkind == Ijk_Call))
      nexts[id] = (Addr)in->next->Iex.Const.con->Ico.U64;
   {
      Int j;
      UShort n = 0;
      for (j = i; j < in->stmts_used; j++)
         if (in->stmts[j]->tag == Ist_IMark)
            n++;
      if (max_instructions != 0) {
         if (id >= lengths_size) {
            lengths_size = lengths_size ? 2 * lengths_size : 4096;
            lengths = VG_(realloc)("retrace.lengths", lengths, lengths_size * sizeof *lengths);
         }
         lengths[id] = n;
      }
      put_u8('B');
      put_u32(id);
      put_u64(entry);
      put_u64(nexts[id]);
      put_u16(n);
      for (j = i; j < in->stmts_used; j++) {
         IRStmt* st = in->stmts[j];
         if (st->tag == Ist_IMark) {
            Addr a = (Addr)st->Ist.IMark.addr;
            UChar len = (UChar)st->Ist.IMark.len;
            put_u64(a);
            put_u8(len);
            put((const void*)a, len);
         }
      }
      {
         UShort m = 0;
         Int marks_seen = 0;
         for (j = i; j < in->stmts_used; j++)
            if (in->stmts[j]->tag == Ist_Exit)
               m++;
         put_u16(m);
         for (j = i; j < in->stmts_used; j++) {
            IRStmt* st = in->stmts[j];
            if (st->tag == Ist_IMark) {
               marks_seen++;
            } else if (st->tag == Ist_Exit) {
               put_u16((UShort)(marks_seen - 1));
               put_u64(exit_target(st));
            }
         }
      }
   }
   {
      IRDirty* d = unsafeIRDirty_0_N(1, "entered", VG_(fnptr_to_fnentry)(&entered), mkIRExprVec_1(mkIRExpr_HWord(id)));
      addStmtToIRSB(out, IRStmt_Dirty(d));
   }
   for (; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      if (full && (st->tag == Ist_IMark || st->tag == Ist_Exit))
         flush_written(out, index, &written_lo, &written_hi);
      if (st->tag == Ist_IMark)
         index++;
      if (st->tag == Ist_Exit) {
         IRDirty* d = unsafeIRDirty_0_N(2, "left_at", VG_(fnptr_to_fnentry)(&left_at),
                                        mkIRExprVec_2(mkIRExpr_HWord(exits), mkIRExpr_HWord(exit_target(st))));
         exits++;
         d->guard = st->Ist.Exit.guard;
         addStmtToIRSB(out, IRStmt_Dirty(d));
      }
      addStmtToIRSB(out, st);
      if (full)
         instrument_effects(out, st, index, &written_lo, &written_hi);
   }
   if (full)
      flush_written(out, index, &written_lo, &written_hi);
   return out;
}

static Bool process_option(const HChar* arg)
{
   if (VG_STR_CLO(arg, "--retrace-out", out_format)) {
      return True;
   }
   if (VG_STR_CLO(arg, "--retrace-server", server)) {
      return True;
   }
   if (VG_INT_CLO(arg, "--retrace-max-insns", max_instructions)) {
      return True;
   }
   if (VG_BOOL_CLO(arg, "--retrace-full", full)) {
      return True;
   }
   return False;
}

static void print_usage(void)
{
   VG_(printf)("    --retrace-server=IP:PORT   send each image's log to retrace there\n");
   VG_(printf)("    --retrace-out=PATH   write the log to PATH.<pid>.<n>\n");
   VG_(printf)("    --retrace-max-insns=N   end the program after about N instructions\n");
   VG_(printf)("    --retrace-full=yes   also log every register and memory write, and what the kernel writes\n");
}

static void print_debug_usage(void)
{
}

/* Valgrind's gdbserver hands the tool `monitor` commands it does not
   know: `retrace last-write` answers "last-write ADDRESS SIZE" (hex, the
   program's last write to memory, with --retrace-full=yes). */
static Bool handle_client_request(ThreadId slot, UWord* arg, UWord* ret)
{
   const HChar* command;
   if (arg[0] != VG_USERREQ__GDB_MONITOR_COMMAND)
      return False;
   command = (const HChar*)arg[1];
   if (VG_(strcmp)(command, "retrace last-write") != 0)
      return False;
   VG_(gdb_printf)("last-write %#lx %#llx\n", (unsigned long)last_write_address, last_write_size);
   *ret = 1;
   return True;
}

static void post_clo_init(void)
{
   if (out_format == NULL && server == NULL) {
      VG_(umsg)("retrace: --retrace-server=IP:PORT or --retrace-out=PATH is required (retrace record --backend valgrind passes it)\n");
      VG_(exit)(1);
   }
   open_log();
   if (full) {
      /* Every register in the guest state at every instruction: else
         VEX keeps a value in a temporary when a later instruction of the
         superblock overwrites it, and the helpers could not see it. (As
         --vex-iropt-register-updates=allregs-at-each-insn.) */
      VG_(clo_vex_control).iropt_register_updates_default = VexRegUpdAllregsAtEachInsn;
      VG_(clo_px_file_backed) = VexRegUpdAllregsAtEachInsn;
      VG_(track_post_mem_write)(post_mem_write);
      VG_(track_post_reg_write)(post_reg_write);
      VG_(track_new_mem_brk)(new_mem_brk);
      VG_(track_die_mem_brk)(die_mem);
      VG_(track_die_mem_munmap)(die_mem);
      VG_(track_copy_mem_remap)(copy_mem_remap);
      VG_(track_change_mem_mprotect)(change_mem_mprotect);
   }
}

static void fini(Int exitcode)
{
   if (last_slot != VG_INVALID_THREADID) {
      put_u8('F');
      put_u64(VG_(get_IP)(last_slot));
   }
   flush();
}

static void pre_clo_init(void)
{
   VG_(details_name)("retrace");
   VG_(details_version)("0.1");
   VG_(details_description)("records control flow for retrace as Intel PT");
   VG_(details_copyright_author)("retrace authors");
   VG_(details_bug_reports_to)("retrace");
   VG_(basic_tool_funcs)(post_clo_init, instrument, fini);
   VG_(needs_command_line_options)(process_option, print_usage, print_debug_usage);
   VG_(needs_syscall_wrapper)(pre_syscall, post_syscall);
   VG_(needs_client_requests)(handle_client_request);
   VG_(track_new_mem_startup)(new_mem_startup);
   VG_(track_new_mem_mmap)(new_mem_mmap);
   VG_(track_start_client_code)(start_client_code);
   VG_(track_pre_thread_ll_create)(thread_create);
   VG_(track_pre_thread_ll_exit)(thread_exit);
   VG_(track_pre_deliver_signal)(deliver_signal);
   VG_(atfork)(at_fork_pre, NULL, at_fork_child);
   init_pieces();
}

VG_DETERMINE_INTERFACE_VERSION(pre_clo_init)
