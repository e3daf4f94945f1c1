/* Loads a known value into every general register but rsp, stops on its own
 * int3, then exits through a raw exit(0) system call: a debugger stopped at
 * the int3 must show exactly these values. */
int main(void) {
  __asm__ volatile(
      "movabs $0x1010101010101010, %rax\n\t"
      "movabs $0x2020202020202020, %rbx\n\t"
      "movabs $0x3030303030303030, %rcx\n\t"
      "movabs $0x4040404040404040, %rdx\n\t"
      "movabs $0x5050505050505050, %rsi\n\t"
      "movabs $0x6060606060606060, %rdi\n\t"
      "movabs $0x7070707070707070, %rbp\n\t"
      "movabs $0x0808080808080808, %r8\n\t"
      "movabs $0x0909090909090909, %r9\n\t"
      "movabs $0x0a0a0a0a0a0a0a0a, %r10\n\t"
      "movabs $0x0b0b0b0b0b0b0b0b, %r11\n\t"
      "movabs $0x0c0c0c0c0c0c0c0c, %r12\n\t"
      "movabs $0x0d0d0d0d0d0d0d0d, %r13\n\t"
      "movabs $0x0e0e0e0e0e0e0e0e, %r14\n\t"
      "movabs $0x0f0f0f0f0f0f0f0f, %r15\n\t"
      "int3\n\t"
      "mov $60, %eax\n\t"
      "xor %edi, %edi\n\t"
      "syscall\n\t");
  return 1;
}
