#include <stdio.h>
int main(void) { puts("ftest: under construction"); return 0; }
