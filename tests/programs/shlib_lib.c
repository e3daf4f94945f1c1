extern int demo_calls;
__attribute__((noinline)) static int rotate(int v) { return (v << 3) | ((unsigned)v >> 29); }
int demo_mix(int a, int b) { demo_calls++; return b & 1 ? rotate(a) ^ b : a + b; }
