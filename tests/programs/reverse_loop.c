/* Long loops to step back over (the shim's reverse-next benchmark,
 * stub/benches/reverse_next.rs): a loop of LOOP iterations written on one
 * line, and a call to a function running the same loop. The tests find
 * their lines by the markers in the comments. */
#ifndef LOOP
#define LOOP 150000
#endif

__attribute__((noinline)) long spin(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += i; /* line:spin */
    return s;
}

int main(void) {
    long total = 0;
    for (int r = 0; r < 3; r++) {
        total += r; /* line:body */
    }
    long s = 0; for (long i = 0; i < LOOP; i++) s += i ^ total; /* line:loop */
    total += spin(LOOP); /* line:call */
    return (int)(total + s) & 1; /* line:end */
}
