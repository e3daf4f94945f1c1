/* A loop of calls with locals, for Step Back through retrace-dap
 * (plugin/vscode/test/dap.test.js): the tests find their lines by the
 * markers in the comments. -DROUNDS=N: the loop's length (3). */
#include <stdio.h>

#ifndef ROUNDS
#define ROUNDS 3
#endif

volatile int seen;

static int square(int x) {
    int y = x * x; /* line:square */
    return y;
}

int main(void) {
    int total = 0;
    for (int i = 0; i < ROUNDS; i++) {
        int s = square(i); /* line:call */
        total += s; /* line:add */
    }
    seen += total + seen * ROUNDS; /* line:rows (three line-table rows) */
    printf("%d\n", total); /* line:print */
    return 0;
}
