/* Creates threads in a loop (ROUNDS rounds of THREADS threads, each joined)
 * and prints how many ran. A new thread's first stop must never reach it as
 * a SIGSTOP, and none may run untraced. */
#include <pthread.h>
#include <stdio.h>

#define ROUNDS 4
#define THREADS 3

static int ran;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *work(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    ran++;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    for (int round = 0; round < ROUNDS; round++) {
        pthread_t threads[THREADS];
        for (int i = 0; i < THREADS; i++) {
            if (pthread_create(&threads[i], NULL, work, NULL) != 0) {
                return 1;
            }
        }
        for (int i = 0; i < THREADS; i++) {
            pthread_join(threads[i], NULL);
        }
    }
    printf("%d threads ran\n", ran);
    return 0;
}
