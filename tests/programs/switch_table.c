/* A dense switch: a jump table (an indirect jump) at -O2. */
volatile int acc;
__attribute__((noinline)) static int classify(int v) {
  switch (v) {
  case 0: return 11; case 1: return 22; case 2: return acc + 3; case 3: return 44;
  case 4: return acc * 2; case 5: return 66; case 6: return 77; case 7: return acc - 1;
  case 8: return 99; case 9: return 100; default: return -1;
  }
}
int main(void) {
  for (int i = 0; i < 40; i++) acc += classify((i * 7) % 12);
  return acc & 0x7f;
}
