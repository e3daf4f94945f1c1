/* Loads known values into callee-saved registers, then calls checkpoint():
 * a debugger stopped there must show exactly these values. */
__attribute__((noinline)) void checkpoint(void) { __asm__ volatile("nop"); }
int main(void) {
  __asm__ volatile(
      "movabs $0x1111222233334444, %%rbx\n\t"
      "movabs $0x5555666677778888, %%r12\n\t"
      "movabs $0x99990000aaaabbbb, %%r13\n\t"
      "movabs $0x0123456789abcdef, %%r14\n\t"
      "movabs $0xfedcba9876543210, %%r15\n\t"
      "call checkpoint\n\t"
      :
      :
      : "rbx", "r12", "r13", "r14", "r15", "memory");
  return 0;
}
