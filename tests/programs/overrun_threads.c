/* Workers run while main waits in pthread_join; worker 0 alone overruns
 * g.arr[4] into g.shared (its loop runs one past the end). The writer
 * records its tid, so the program itself says which thread wrote.
 * argv[1]: how many workers (1 by default); the others only count. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct globals { int arr[4]; int shared; } g = { {0}, 44 };
long writer;
volatile int counted[4];

static void *worker(void *arg) {
    int k = (int)(long)arg;
    if (k == 0) {
        writer = syscall(SYS_gettid);
        for (int i = 0; i <= 4; i++) g.arr[i] = 3 + i; /* overrun */
    } else {
        for (int i = 0; i < 50; i++) counted[k]++;
    }
    return 0;
}

__attribute__((noinline)) void joined(void) { __asm__ volatile(""); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    pthread_t threads[4];
    for (long k = 0; k < n && k < 4; k++)
        pthread_create(&threads[k], 0, worker, (void *)k);
    for (int k = 0; k < n && k < 4; k++)
        pthread_join(threads[k], 0);
    joined();
    return g.shared == 7 ? 0 : 1;
}
