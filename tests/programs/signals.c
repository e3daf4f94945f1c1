/* A handled signal raised twice, then an exit status that depends on it. */
#include <signal.h>
#include <string.h>
volatile sig_atomic_t caught;
static void on_usr1(int sig) { caught += sig == SIGUSR1; }
int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, 0);
  raise(SIGUSR1);
  raise(SIGUSR1);
  return 40 + caught;
}
