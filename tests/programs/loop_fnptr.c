/* A loop with a conditional branch and an indirect call through a function pointer. */
volatile int g;
static int triple_plus_one(int x) { return x * 3 + 1; }
static int square(int x) { return x * x; }
int main(void) {
  int (*ops[2])(int) = {triple_plus_one, square};
  for (int i = 0; i < 20; i++) {
    if (i & 1) g += ops[(i >> 1) & 1](i);
    else g -= i;
  }
  return g & 0x7f;
}
