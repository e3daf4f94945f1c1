/* reverse-next back over a call that holds a breakpoint (f, called twice):
   it stops at the breakpoint, in the second call. */
#include <stdio.h>
int g;
void f(int x) {
    g += x;
}
int main(void) {
    f(1);
    f(2);
    printf("%d\n", g);
    return 0;
}
