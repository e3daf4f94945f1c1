/* Calls into a shared library built by the test (libretracedemo.so). */
int demo_mix(int a, int b);
int demo_calls;
int main(void) {
  int v = 0;
  for (int i = 0; i < 10; i++) v = demo_mix(v, i);
  return v & 0x7f;
}
