/* Four threads, each calling hit() once, one at a time under a lock; each
 * writes its tid into order[] just before its call, so the program itself
 * says in which order the hits came. */
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
long order[4];
int hits;

__attribute__((noinline)) void hit(int k) { __asm__ volatile("" ::"r"(k)); }
__attribute__((noinline)) void done(void) { __asm__ volatile(""); }

static void *worker(void *arg) {
    pthread_mutex_lock(&lock);
    order[hits++] = syscall(SYS_gettid);
    hit((int)(long)arg);
    pthread_mutex_unlock(&lock);
    return 0;
}

int main(void) {
    pthread_t threads[4];
    for (long k = 0; k < 4; k++)
        pthread_create(&threads[k], 0, worker, (void *)k);
    for (int k = 0; k < 4; k++)
        pthread_join(threads[k], 0);
    done();
    return 0;
}
