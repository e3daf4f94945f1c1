/* Writes through a null pointer three times; a SIGSEGV handler jumps back
 * out each time (siglongjmp), then the program exits with the count. */
#include <setjmp.h>
#include <signal.h>

static sigjmp_buf back;
static volatile int faults;
volatile int *volatile nowhere;

static void on_segv(int signal) {
  (void)signal;
  faults++;
  siglongjmp(back, 1);
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = on_segv;
  sigaction(SIGSEGV, &action, 0);
  for (int i = 0; i < 3; i++) {
    if (sigsetjmp(back, 1) == 0)
      *nowhere = i;
  }
  return faults;
}
