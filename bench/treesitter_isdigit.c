/* tree-sitter-bash 0.25.1: '{' followed by a large code point makes the external scanner call isdigit() on it.

   The upstream reproducer of bench/treesitter_crash.py, without Python. Build it from tree-sitter v0.26.1's lib/ and
   the tree-sitter-bash 0.25.1 sdist's src/ (pip download --no-binary :all: tree-sitter-bash==0.25.1):

     gcc -O1 -g -o bash_isdigit -I ts/lib/include -I ts/lib/src -I tsb/src \
         bench/treesitter_isdigit.c ts/lib/src/lib.c tsb/src/parser.c tsb/src/scanner.c
     LC_ALL=C ./bash_isdigit                               # SIGSEGV (10/10 here: glibc 2.36, Debian 12, x86_64)
     LC_ALL=C ./bash_isdigit "$(printf 'echo {1..\U000CB100}')"   # SIGSEGV: the second isdigit() loop
     LC_ALL=C ./bash_isdigit 'echo {1..3}'                 # fine

   gdb: scan (...) at src/scanner.c:1158: while (isdigit(lexer->lookahead)) {
   Here U+80000 and above crash every time under LC_ALL=C, U+40000 and below never (the read lands in mapped
   memory and returns garbage); under C.UTF-8 the table is the mapped locale file and the threshold moves. */
#include <locale.h>
#include <stdio.h>
#include <string.h>
#include <tree_sitter/api.h>
const TSLanguage *tree_sitter_bash(void);
int main(int argc, char **argv) {
  setlocale(LC_ALL, "");                   /* any program that honours the locale (Python does): C.UTF-8 here */
  const char *src = argc > 1 ? argv[1] : "{\xf3\x8b\x84\x80";   /* '{' U+CB100 */
  TSParser *p = ts_parser_new();
  ts_parser_set_language(p, tree_sitter_bash());
  TSTree *t = ts_parser_parse_string(p, NULL, src, strlen(src));
  printf("%s\n", ts_node_string(ts_tree_root_node(t)));
  return 0;
}
