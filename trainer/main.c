#include <stdio.h>
int main(void) { puts("ftrain: under construction"); return 0; }
