"""The objects' memos: a memo nothing was stored in is not kept, one with something is."""

import copy
import gc
import pickle

import kopf
from kopf._structures.memos import ObjectMemos


def test_a_memo_is_a_copy_of_the_operators_and_a_kopf_memo() -> None:
    memos = ObjectMemos(kopf.Memo(shared=[1]))
    memo = memos.of('uid-a')
    assert isinstance(memo, kopf.Memo) and memo == {'shared': [1]} and memo.shared == [1]
    assert memo.shared is memos.of('uid-b').shared  # a shallow copy, as in Kopf


def test_an_unused_memo_is_not_kept_but_is_the_same_while_in_use() -> None:
    memos = ObjectMemos(kopf.Memo())
    memo = memos.of('uid-a')
    assert memos.of('uid-a') is memo
    assert len(memos) == 0
    del memo
    gc.collect()
    assert memos.of('uid-a') == {}
    assert len(memos) == 0


def test_a_memo_with_something_stored_is_kept() -> None:
    memos = ObjectMemos(kopf.Memo())
    memos.of('uid-a').counter = 1
    memos.of('uid-b')['key'] = 'value'
    memos.of('uid-c').setdefault('items', []).append(1)
    memos.of('uid-d').update(x=1)
    in_place = memos.of('uid-e')
    in_place |= {'y': 2}
    del in_place
    gc.collect()
    assert len(memos) == 5
    assert memos.of('uid-a').counter == 1
    assert memos.of('uid-b') == {'key': 'value'}
    assert memos.of('uid-c') == {'items': [1]}
    assert memos.of('uid-d') == {'x': 1}
    assert memos.of('uid-e') == {'y': 2}


def test_a_memo_emptied_again_is_still_kept() -> None:
    memos = ObjectMemos(kopf.Memo(flag=True))
    memo = memos.of('uid-a')
    del memo.flag
    del memo
    gc.collect()
    assert memos.of('uid-a') == {}


def test_copies_are_plain_memos_and_take_no_objects_place() -> None:
    memos = ObjectMemos(kopf.Memo())
    memo = memos.of('uid-a')
    for other in [copy.copy(memo), copy.deepcopy(memo), pickle.loads(pickle.dumps(memo))]:
        assert type(other) is kopf.Memo
        other['x'] = 1
    assert memos.of('uid-a') == {} and len(memos) == 0


def test_a_forgotten_object_keeps_no_memo() -> None:
    memos = ObjectMemos(kopf.Memo())
    memos.of('uid-a').x = 1
    in_use = memos.of('uid-b')
    memos.forget('uid-a')
    memos.forget('uid-b')
    in_use.x = 1  # a handler still running after the object is gone
    assert len(memos) == 0 and memos.of('uid-a') == {}


def test_another_kind_of_memo_is_kept_for_every_object() -> None:
    class Own(kopf.Memo):
        pass

    memos = ObjectMemos(Own(a=1))
    memo = memos.of('uid-a')
    assert type(memo) is Own and memo == {'a': 1}
    del memo
    assert len(memos) == 1


def test_the_memos_no_longer_in_use_are_not_remembered_forever() -> None:
    memos = ObjectMemos(kopf.Memo())
    in_use = memos.of('uid-kept-in-use')
    for number in range(10_000):
        memos.of(f'uid-{number}')  # used and dropped at once, as by most calls
    assert len(memos._unused) <= 2 * 64
    assert memos.of('uid-kept-in-use') is in_use
    in_use.counter = 1
    del in_use
    gc.collect()
    assert memos.of('uid-kept-in-use') == {'counter': 1}


def test_a_forgotten_memo_is_not_kept_when_stored_in_later() -> None:
    memos = ObjectMemos(kopf.Memo())
    memo = memos.of('uid-a')
    memos.forget('uid-a')
    memo.late = True
    assert len(memos) == 0 and memos.of('uid-a') == {}


def test_a_conversions_memo_is_the_objects_own_if_kept_else_not_kept() -> None:
    memos = ObjectMemos(kopf.Memo())
    kept = memos.of("u1")
    kept.x = 1  # written to: kept for the object
    assert memos.existing("u1") is kept
    in_use = memos.of("u3")  # not written to, but held by a running handler
    assert memos.existing("u3") is in_use
    empty = memos.existing("u2")
    assert empty is not memos.existing("u2"), "a fresh copy each time: nothing is kept"
    assert len(memos) == 1
