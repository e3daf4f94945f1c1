/* Full-state recordings: registers, stores, what the kernel writes (a
   pipe's bytes read into a global), floating point in xmm registers, heap
   memory, a loop run often enough to hit a breakpoint many times. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long counter;
char buffer[64];
double ratio = 1.5;

static long mix(long a, long b)
{
    long r = a * 31 + b;
    if (r & 1)
        r ^= 0x55aa;
    else
        r += 7;
    return r;
}

int main(void)
{
    int fds[2];
    long total = 0;
    char *heap;
    if (pipe(fds) != 0)
        return 1;
    if (write(fds[1], "retrace full state", 18) != 18)
        return 2;
    if (read(fds[0], buffer, sizeof buffer) != 18)
        return 3;
    heap = malloc(256);
    for (int i = 0; i < 40; i++) {
        total = mix(total, buffer[i % 18]);
        heap[i] = (char)total;
        counter += i;
        ratio = ratio * 1.25 - i;
    }
    printf("%ld %d %.3f\n", total, heap[7], ratio);
    return 0;
}
