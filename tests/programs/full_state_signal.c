/* Full-state recordings through a signal handler: SIGUSR1 raised three
   times in a loop; the handler (with a local) changes globals the loop
   reads back. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

volatile long hits;
volatile long seen[3];

static void on_usr1(int sig)
{
    long twice = hits * 2 + sig;
    seen[hits] = twice;
    hits++;
}

int main(void)
{
    struct sigaction sa;
    long sum = 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    for (int i = 0; i < 3; i++) {
        raise(SIGUSR1);
        sum += seen[i] + i;
    }
    printf("%ld %ld\n", hits, sum);
    return 0;
}
