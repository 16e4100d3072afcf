/* many_one: the tiny library many_libs maps hundreds of copies of. */
int many_one(int x) { return x + 1; }
