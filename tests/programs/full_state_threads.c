/* Four threads fill their own rows of a shared table in a loop; main joins
   them and sums what they wrote. No value depends on how the threads
   interleave, so a replay can be compared with a native run. */
#include <pthread.h>
#include <stdio.h>

#define WORKERS 4
#define ROUNDS 50

long table[WORKERS][ROUNDS];
long sums[WORKERS];

static void *work(void *arg)
{
    long id = (long)arg;
    long acc = id + 1;
    for (int r = 0; r < ROUNDS; r++) {
        acc = acc * 6364136223846793005L + 1442695040888963407L;
        table[id][r] = acc >> 17;
        sums[id] += table[id][r] & 0xffff;
    }
    return 0;
}

int main(void)
{
    pthread_t threads[WORKERS];
    long total = 0;
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&threads[i], 0, work, (void *)i);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(threads[i], 0);
    for (int i = 0; i < WORKERS; i++)
        total += sums[i];
    printf("%ld\n", total);
    return 0;
}
