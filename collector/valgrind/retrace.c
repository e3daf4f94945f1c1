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

static inline void put(const void* bytes, UInt n)
{
   way_slot = -1;
   if (used + n > sizeof buffer)
      flush();
   VG_(memcpy)(buffer + used, bytes, n);
   used += n;
}

static inline void put_u8(UChar v) { put(&v, 1); }
static inline void put_u16(UShort v) { put(&v, 2); }
static inline void put_u32(UInt v) { put(&v, 4); }
static inline void put_u64(ULong v) { put(&v, 8); }

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

static void new_mem_startup(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, ULong di_handle)
{
   log_mapping(a, len);
}

static void new_mem_mmap(Addr a, SizeT len, Bool rr, Bool ww, Bool xx, ULong di_handle)
{
   log_mapping(a, len);
}

static UInt thread_number(ThreadId slot)
{
   tl_assert(slot < MAX_SLOTS);
   if (number_of_slot[slot] == 0)
      number_of_slot[slot] = next_number++;
   return number_of_slot[slot];
}

static void start_client_code(ThreadId slot, ULong blocks_done)
{
   if (slot == running_slot)
      return;
   running_slot = slot;
   last_slot = slot;
   predicted = 0;
   put_u8('T');
   put_u32(thread_number(slot));
   put_u32((UInt)VG_(gettid)());
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
   if (running_slot == slot)
      running_slot = VG_INVALID_THREADID;
}

static void deliver_signal(ThreadId slot, Int signal, Bool alt_stack)
{
   start_client_code(slot, 0);
   predicted = 0;
   put_u8('S');
   put_u32((UInt)signal);
   put_u64(VG_(get_IP)(slot));
}

static VG_REGPARM(1) void entered(UWord id)
{
   in_foreign_code = False;
   if (used + 6 > sizeof buffer)
      flush();
   if (predicted != 0 && predicted == entries[id]) {
      buffer[used] = 0x80;
      way_slot = (Int)used;
      way_slot_max = 0x7f;
      used += 1;
   } else {
      UInt number = (UInt)id;
      buffer[used] = 'E';
      VG_(memcpy)(buffer + used + 1, &number, 4);
      buffer[used + 5] = 0;
      way_slot = (Int)used + 5;
      way_slot_max = 0xff;
      used += 6;
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
      if (st->tag == Ist_Exit) {
         IRDirty* d = unsafeIRDirty_0_N(2, "left_at", VG_(fnptr_to_fnentry)(&left_at),
                                        mkIRExprVec_2(mkIRExpr_HWord(exits), mkIRExpr_HWord(exit_target(st))));
         exits++;
         d->guard = st->Ist.Exit.guard;
         addStmtToIRSB(out, IRStmt_Dirty(d));
      }
      addStmtToIRSB(out, st);
   }
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
   return False;
}

static void print_usage(void)
{
   VG_(printf)("    --retrace-server=IP:PORT   send each image's log to retrace there\n");
   VG_(printf)("    --retrace-out=PATH   write the log to PATH.<pid>.<n>\n");
   VG_(printf)("    --retrace-max-insns=N   end the program after about N instructions\n");
}

static void print_debug_usage(void)
{
}

static void post_clo_init(void)
{
   if (out_format == NULL && server == NULL) {
      VG_(umsg)("retrace: --retrace-server=IP:PORT or --retrace-out=PATH is required (retrace record --backend valgrind passes it)\n");
      VG_(exit)(1);
   }
   open_log();
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
   VG_(track_new_mem_startup)(new_mem_startup);
   VG_(track_new_mem_mmap)(new_mem_mmap);
   VG_(track_start_client_code)(start_client_code);
   VG_(track_pre_thread_ll_create)(thread_create);
   VG_(track_pre_thread_ll_exit)(thread_exit);
   VG_(track_pre_deliver_signal)(deliver_signal);
   VG_(atfork)(at_fork_pre, NULL, at_fork_child);
}

VG_DETERMINE_INTERFACE_VERSION(pre_clo_init)
