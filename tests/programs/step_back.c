/* A loop of calls with locals, for Step Back through retrace-dap
 * (plugin/vscode/test/dap.test.js): the tests find their lines by the
 * markers in the comments. */
#include <stdio.h>

static int square(int x) {
    int y = x * x; /* line:square */
    return y;
}

int main(void) {
    int total = 0;
    for (int i = 0; i < 3; i++) {
        int s = square(i); /* line:call */
        total += s; /* line:add */
    }
    printf("%d\n", total); /* line:print */
    return 0;
}
