/**
 * One value per key object, built on first use: `build(key)` runs once per key, later calls return
 * the same value, and the value goes when the key is garbage (a `WeakMap`).
 */
export function memoizeByObject<K extends object, V>(build: (key: K) => V): (key: K) => V {
  const built = new WeakMap<K, V>();
  return (key) => {
    let value = built.get(key);
    if (value === undefined) {
      value = build(key);
      built.set(key, value);
    }
    return value;
  };
}
