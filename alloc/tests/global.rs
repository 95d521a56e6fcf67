//! The allocator installed as a program's global allocator, as the binaries install it: the
//! standard collections, boxes of over-aligned types and threads freeing what others allocated.

use switchyard_alloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

#[repr(align(128))]
struct CacheLine([u8; 128]);

#[test]
fn collections_boxes_and_cross_thread_frees_work_on_it() {
    let mut v: Vec<u64> = Vec::new();
    for i in 0..100_000u64 {
        v.push(i * 3);
    }
    assert_eq!(v.iter().sum::<u64>(), 3 * (100_000 * 99_999 / 2));
    let lines: Vec<Box<CacheLine>> = (0..1000)
        .map(|i| Box::new(CacheLine([i as u8; 128])))
        .collect();
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(&**line as *const CacheLine as usize % 128, 0);
        assert!(line.0.iter().all(|&b| b == i as u8));
    }
    let text: String = (0..10_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let handle = std::thread::spawn(move || {
        // Freed on another thread than the one that allocated them.
        let n = lines.len() + text.len();
        drop(lines);
        drop(text);
        n
    });
    assert_eq!(handle.join().expect("thread"), 11_000);
}
