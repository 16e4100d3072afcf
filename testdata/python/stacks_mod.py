"""The second module of stacks.py: non-ASCII names (Latin-1, UCS-2 and
UCS-4 in CPython's compact strings), a class method for co_qualname, a
decorated function (co_firstlineno is the decorator's line) and a call
spread over several lines, so that a frame's line is not its function's
first line."""


def größe(callback):
    # Latin-1 name: a compact, non-ASCII string of kind 1.
    total = 0
    for i in range(3):
        total += i
    return Klasse().methode(
        callback,
        total,
    )


class Klasse:
    def methode(self, callback, total):
        return функция(callback) + total


def функция(callback):
    # Cyrillic name: kind 2 (UCS-2).
    return 𠀀(callback)


def 𠀀(callback):
    # CJK Extension B name: kind 4 (UCS-4). NFKC leaves it as it is.
    x = [
        1,
        2,
    ]
    return callback(
        x,
    )


def decorate(f):
    return f


@decorate
def decorated():
    return 1


def long_function(n):
    # Enough lines for the line tables' multi-byte deltas.
    a = n
    a += 1
    a += 2
    a += 3
    a += 4
    a += 5
    a += 6
    a += 7
    a += 8
    a += 9
    a += 10
    a += 11
    a += 12
    a += 13
    a += 14
    a += 15
    a += 16
    a += 17
    a += 18
    a += 19
    a += 20
    a += 21
    a += 22
    a += 23
    a += 24
    a += 25
    a += 26
    a += 27
    a += 28
    a += 29
    a += 30
    a += 31
    a += 32
    a += 33
    a += 34
    a += 35
    a += 36
    a += 37
    a += 38
    a += 39
    a += 40
    a += 41
    a += 42
    a += 43
    a += 44
    a += 45
    a += 46
    a += 47
    a += 48
    a += 49
    a += 50
    a += 51
    a += 52
    a += 53
    a += 54
    a += 55
    a += 56
    a += 57
    a += 58
    a += 59
    a += 60
    a += 61
    a += 62
    a += 63
    a += 64
    a += 65
    a += 66
    a += 67
    a += 68
    a += 69
    a += 70



















































































































































    return a


def loop_back(n):
    # A loop: the line table goes back up.
    s = 0
    while n > 0:
        s += n
        n -= 1
    else:
        s += 1
    try:
        s //= n
    except ZeroDivisionError:
        s = -s
    return s
