/* A test-only Valgrind tool: the tests' independent instruction log of a
 * program run under Valgrind. Every guest instruction Valgrind runs (its
 * IMark), with the OS thread that ran it, nothing else: no superblocks, no
 * exits, nothing shared with retrace's tool but Valgrind itself.
 * Log (little-endian): 'T' u32 tid when the running thread changes,
 * 'I' u64 address per instruction. Written to --imarks-out=PATH.<pid>.
 */

#include "pub_tool_basics.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_options.h"
#include "pub_tool_vki.h"
#include "pub_tool_threadstate.h"
#include "pub_tool_machine.h"

static const HChar* out = NULL;
static Int fd = -1;
static UChar buffer[1 << 20];
static UInt used = 0;
static ThreadId running = VG_INVALID_THREADID;

static void flush(void)
{
   UInt done = 0;
   while (done < used) {
      Int n = VG_(write)(fd, buffer + done, used - done);
      tl_assert(n > 0);
      done += n;
   }
   used = 0;
}

static void put(const void* bytes, UInt n)
{
   if (used + n > sizeof buffer)
      flush();
   VG_(memcpy)(buffer + used, bytes, n);
   used += n;
}

static void switched(ThreadId tid, ULong blocks)
{
   if (tid != running) {
      UInt os = (UInt)VG_(gettid)();
      running = tid;
      put("T", 1);
      put(&os, 4);
   }
}

static VG_REGPARM(1) void mark(Addr a)
{
   ULong v = a;
   put("I", 1);
   put(&v, 8);
}

static IRSB* instrument(VgCallbackClosure* closure, IRSB* in, const VexGuestLayout* layout,
                        const VexGuestExtents* extents, const VexArchInfo* arch,
                        IRType guest_word, IRType host_word)
{
   IRSB* sb = deepCopyIRSBExceptStmts(in);
   Int i;
   for (i = 0; i < in->stmts_used; i++) {
      IRStmt* st = in->stmts[i];
      addStmtToIRSB(sb, st);
      if (st->tag == Ist_IMark) {
         IRDirty* d = unsafeIRDirty_0_N(1, "mark", VG_(fnptr_to_fnentry)(&mark),
                                        mkIRExprVec_1(mkIRExpr_HWord((HWord)st->Ist.IMark.addr)));
         addStmtToIRSB(sb, IRStmt_Dirty(d));
      }
   }
   return sb;
}

static void pre_syscall(ThreadId tid, UInt no, UWord* args, UInt n)
{
   flush();
}

static void post_syscall(ThreadId tid, UInt no, UWord* args, UInt n, SysRes res)
{
}

static Bool option(const HChar* arg)
{
   return VG_STR_CLO(arg, "--imarks-out", out);
}

static void usage(void)
{
   VG_(printf)("    --imarks-out=PATH   write the log to PATH.<pid>\n");
}

static void debug_usage(void)
{
}

static void post_clo_init(void)
{
   HChar path[4096];
   SysRes res;
   tl_assert(out != NULL);
   VG_(snprintf)(path, sizeof path, "%s.%d", out, VG_(getpid)());
   res = VG_(open)(path, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC, 0600);
   tl_assert(!sr_isError(res));
   fd = sr_Res(res);
}

static void fini(Int code)
{
   flush();
}

static void pre_clo_init(void)
{
   VG_(details_name)("imarks");
   VG_(details_version)("0");
   VG_(details_description)("retrace's tests: every instruction Valgrind runs");
   VG_(details_copyright_author)("retrace authors");
   VG_(details_bug_reports_to)("retrace");
   VG_(basic_tool_funcs)(post_clo_init, instrument, fini);
   VG_(needs_command_line_options)(option, usage, debug_usage);
   VG_(needs_syscall_wrapper)(pre_syscall, post_syscall);
   VG_(track_start_client_code)(switched);
}

VG_DETERMINE_INTERFACE_VERSION(pre_clo_init)
