// Every Thrift field type, for the interoperability tests of crates/thrift.
namespace py alltypes

enum Color {
    RED = 1,
    GREEN = 2,
    BLUE = 7,
}

struct Leaf {
    1: i32 n,
    2: string s,
}

struct Inner {
    1: Leaf leaf,
    2: list<Leaf> leaves,
    3: map<string, Leaf> by_name,
}

struct AllTypes {
    1: bool b,
    2: i8 y,
    3: i16 s,
    4: i32 i,
    5: i64 l,
    6: double d,
    7: string str,
    8: binary bin,
    9: list<i32> ints,
    10: set<string> names,
    11: map<string, i64> counts,
    12: Inner inner,
    13: Color color,
    14: list<list<i16>> nested_lists,
    15: map<i32, list<Leaf>> deep,
    16: list<bool> flags,
    17: set<i8> small,
    18: list<double> ds,
}

service Kitchen {
    AllTypes echo(1: AllTypes value, 2: i64 stamp),
    oneway void note(1: string text),
}
