/* cudart_throw.h: what libcudart_throw.so throws at (see cudart_throw.cpp). */
#ifndef CUDART_THROW_H
#define CUDART_THROW_H

/* A cudaMalloc request above this many bytes throws std::bad_alloc. */
#define THROW_LIMIT ((size_t)1 << 30)

#endif
