/* Reverse stepping around inlined code: a real function called from code
 * inlined twice over, inlined helpers in a loop, a store in the middle of
 * a line. Built at -O1 and -O2; judged against GDB's own reverse-next,
 * reverse-step and reverse-finish on the same recording. */
#include <stdlib.h>

volatile int sink;
int watched;

__attribute__((noinline)) int leaf(int x) {
    int y = x * 3;
    sink = y;
    return y + 1;
}

static inline int twice(int x) {
    int t = x + x;
    sink = t;
    return t;
}

static inline int step_once(int *state, int i) {
    int a = twice(i);
    *state += a;
    int b = leaf(*state);
    *state ^= b;
    return b;
}

static int run(int n) {
    int state = 1;
    int total = 0;
    for (int i = 0; i < n; i++) {
        total += step_once(&state, i);
        watched = total + i; sink = watched;
    }
    return total;
}

__attribute__((noinline)) void done(int total) { sink = total; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    int total = run(n);
    done(total);
    return 0;
}
