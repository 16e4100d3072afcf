// widget.cc: C++ names for the demangling tests.
namespace ns {

struct Widget {
	int grow(int n);
};

int Widget::grow(int n) { // LINE_GROW
	return n * 2;
}

template <typename T> T twice(T x) {
	return x + x;
}

template int twice<int>(int);

} // namespace ns
