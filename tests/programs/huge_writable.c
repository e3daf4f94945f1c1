/* A process with more writable memory than retrace-stub copies around a
 * system call (512 MiB): a `read()` then writes a buffer unkept, and the
 * buffer before it must read as unavailable, never as what `read()` put
 * there. */
#include <sys/mman.h>
#include <unistd.h>

char buffer[8] = "before";

__attribute__((noinline)) void done(void) {}
__attribute__((noinline)) void before_read(void) {}

int main(void) {
  int fds[2];
  if (pipe(fds) != 0 || write(fds[1], "after!", 7) != 7) return 2;
  void *big = mmap(0, 600ul << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (big == MAP_FAILED) return 3;
  before_read();
  if (read(fds[0], buffer, 7) != 7) return 4;
  done();
  return buffer[0] == 'a' ? 0 : 1;
}
